// Package directorytest is the contract suite of the directory port: every
// adapter of [ports.DirectoryAdmin] runs [Exercise] against its real backend
// (memory, SQLite, PostgreSQL, MS SQL) from one line of its own tests:
//
//	func TestDirectoryContract(t *testing.T) {
//		directorytest.Exercise(t, func(t *testing.T) ports.DirectoryAdmin {
//			return newEmptyDirectory(t)
//		})
//	}
//
// Every subtest asks for a fresh, empty directory and uses nothing else, so
// an adapter may back each with its own database or schema.
package directorytest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// Exercise runs the whole contract against the adapter. newDirectory is
// called once per subtest and must return an empty directory.
func Exercise(t *testing.T, newDirectory func(t *testing.T) ports.DirectoryAdmin) {
	t.Helper()
	t.Run("Lists", func(t *testing.T) { exerciseLists(t, newDirectory) })
	t.Run("Channels", func(t *testing.T) { exerciseChannels(t, newDirectory) })
	t.Run("Concurrent", func(t *testing.T) { exerciseConcurrent(t, newDirectory) })
}

// DiffList lists the fields in which got differs from want, one line per
// field, or nothing when they are equal. Nil and empty Targets are equal;
// the order of targets matters.
func DiffList(want, got ports.List) []string {
	var d []string
	if want.Name != got.Name {
		d = append(d, fmt.Sprintf("Name: want %q, got %q", want.Name, got.Name))
	}
	if want.Type != got.Type {
		d = append(d, fmt.Sprintf("Type: want %q, got %q", want.Type, got.Type))
	}
	if (len(want.Targets) > 0 || len(got.Targets) > 0) && !slices.Equal(want.Targets, got.Targets) {
		d = append(d, fmt.Sprintf("Targets: want %q, got %q", want.Targets, got.Targets))
	}
	return d
}

// DiffChannel lists the fields in which got differs from want, one line per
// field, or nothing when they are equal. Nil and empty Settings are equal.
func DiffChannel(want, got ports.ChannelSettings) []string {
	var d []string
	if want.Type != got.Type {
		d = append(d, fmt.Sprintf("Type: want %q, got %q", want.Type, got.Type))
	}
	if (len(want.Settings) > 0 || len(got.Settings) > 0) && !maps.Equal(want.Settings, got.Settings) {
		d = append(d, fmt.Sprintf("Settings: want %q, got %q", want.Settings, got.Settings))
	}
	if want.Retry != got.Retry {
		d = append(d, fmt.Sprintf("Retry: want %+v, got %+v", want.Retry, got.Retry))
	}
	// Exactly: a rate limit must come back as the same float64.
	if want.RateLimit != got.RateLimit {
		d = append(d, fmt.Sprintf("RateLimit: want %v, got %v", want.RateLimit, got.RateLimit))
	}
	return d
}

// --- helpers -----------------------------------------------------------------

func checkList(t *testing.T, what string, want, got ports.List) {
	t.Helper()
	if d := DiffList(want, got); len(d) > 0 {
		t.Errorf("%s: list %q differs:\n  %s", what, want.Name, strings.Join(d, "\n  "))
	}
}

func checkChannel(t *testing.T, what string, want, got ports.ChannelSettings) {
	t.Helper()
	if d := DiffChannel(want, got); len(d) > 0 {
		t.Errorf("%s: channel %q differs:\n  %s", what, want.Type, strings.Join(d, "\n  "))
	}
}

func mustPutList(t *testing.T, d ports.DirectoryAdmin, ls ...ports.List) {
	t.Helper()
	for _, l := range ls {
		if err := d.PutList(t.Context(), l); err != nil {
			t.Fatalf("PutList(%q): %v", l.Name, err)
		}
	}
}

func mustPutChannel(t *testing.T, d ports.DirectoryAdmin, cs ...ports.ChannelSettings) {
	t.Helper()
	for _, c := range cs {
		if err := d.PutChannel(t.Context(), c); err != nil {
			t.Fatalf("PutChannel(%q): %v", c.Type, err)
		}
	}
}

func mustList(t *testing.T, d ports.DirectoryAdmin, name string) ports.List {
	t.Helper()
	l, err := d.List(t.Context(), name)
	if err != nil {
		t.Fatalf("List(%q): %v", name, err)
	}
	return l
}

func mustChannel(t *testing.T, d ports.DirectoryAdmin, typ string) ports.ChannelSettings {
	t.Helper()
	c, err := d.ChannelSettings(t.Context(), typ)
	if err != nil {
		t.Fatalf("ChannelSettings(%q): %v", typ, err)
	}
	return c
}

func mustLists(t *testing.T, d ports.DirectoryAdmin) []ports.List {
	t.Helper()
	ls, err := d.Lists(t.Context())
	if err != nil {
		t.Fatalf("Lists: %v", err)
	}
	return ls
}

func mustChannels(t *testing.T, d ports.DirectoryAdmin) []ports.ChannelSettings {
	t.Helper()
	cs, err := d.Channels(t.Context())
	if err != nil {
		t.Fatalf("Channels: %v", err)
	}
	return cs
}

// checkNotFound reports when err does not wrap ports.ErrNotFound or does not
// name key (quoted).
func checkNotFound(t *testing.T, what string, err error, key string) {
	t.Helper()
	if !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("%s = %v, want an error wrapping ports.ErrNotFound", what, err)
		return
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
		t.Errorf("%s = %v, want the error to name %q", what, err, key)
	}
}

// checkInvalid reports when err does not wrap ports.ErrInvalid, holds no
// *ports.FieldError naming each of fields, or repeats one of secrets.
func checkInvalid(t *testing.T, what string, err error, fields []string, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s accepted", what)
		return
	}
	if !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("%s = %v, want an error wrapping ports.ErrInvalid", what, err)
	}
	var got []string
	collectFields(err, &got)
	for _, f := range fields {
		if !slices.Contains(got, f) {
			t.Errorf("%s = %v, want a *ports.FieldError for field %q (got fields %q)", what, err, f, got)
		}
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s = %v: the error repeats the value %q", what, err, s)
		}
	}
}

// collectFields appends the Field of every *ports.FieldError in err's tree.
func collectFields(err error, into *[]string) {
	if fe, ok := err.(*ports.FieldError); ok {
		*into = append(*into, fe.Field)
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			collectFields(e, into)
		}
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			collectFields(e, into)
		}
	}
}

// names returns the names of ls in order.
func names(ls []ports.List) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}

// types returns the types of cs in order.
func types(cs []ports.ChannelSettings) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Type
	}
	return out
}

// --- lists -------------------------------------------------------------------

func exerciseLists(t *testing.T, newDirectory func(t *testing.T) ports.DirectoryAdmin) {
	t.Run("RoundTrip", func(t *testing.T) {
		d := newDirectory(t)
		full := ports.List{
			Name: "ops-oncall ünïcödé",
			Type: "webhook",
			// Not sorted: the order is kept. References are valid targets.
			Targets: []string{
				"https://hooks.example.test/b?token=env",
				"env:OPS_HOOK_URL",
				"https://hooks.example.test/a",
				"file:/run/secrets/hook url",
				`quote ' double " backslash \ tab` + "\t" + `ünïcödé ✓`,
			},
		}
		empty := ports.List{Name: "nobody", Type: "email"}
		mustPutList(t, d, full, empty)
		checkList(t, "List of a full list", full, mustList(t, d, full.Name))
		got := mustList(t, d, empty.Name)
		checkList(t, "List of a list without targets", empty, got)
		if len(got.Targets) != 0 {
			t.Errorf("List of a list without targets has targets %q", got.Targets)
		}
		all := mustLists(t, d)
		if len(all) != 2 {
			t.Fatalf("Lists = %q, want 2 lists", names(all))
		}
		checkList(t, "Lists", empty, all[0])
		checkList(t, "Lists", full, all[1])
	})

	t.Run("PutReplaces", func(t *testing.T) {
		d := newDirectory(t)
		mustPutList(t, d, ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.test", "b@example.test", "c@example.test"}})
		next := ports.List{Name: "ops", Type: "webhook", Targets: []string{"https://hooks.example.test/x"}}
		mustPutList(t, d, next)
		checkList(t, "List after a replace", next, mustList(t, d, "ops"))
		none := ports.List{Name: "ops", Type: "webhook"}
		mustPutList(t, d, none)
		checkList(t, "List after a replace without targets", none, mustList(t, d, "ops"))
		if all := mustLists(t, d); len(all) != 1 {
			t.Errorf("Lists after replaces = %q, want one list", names(all))
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		d := newDirectory(t)
		_, err := d.List(t.Context(), "missing")
		checkNotFound(t, "List of an absent list", err, "missing")
		checkNotFound(t, "DeleteList of an absent list", d.DeleteList(t.Context(), "missing"), "missing")
		if all := mustLists(t, d); len(all) != 0 {
			t.Errorf("Lists of an empty directory = %q", names(all))
		}
	})

	t.Run("Delete", func(t *testing.T) {
		d := newDirectory(t)
		mustPutList(t, d, ports.List{Name: "ops", Type: "email"}, ports.List{Name: "dev", Type: "email"})
		if err := d.DeleteList(t.Context(), "ops"); err != nil {
			t.Fatalf("DeleteList(ops): %v", err)
		}
		_, err := d.List(t.Context(), "ops")
		checkNotFound(t, "List of a deleted list", err, "ops")
		checkNotFound(t, "second DeleteList", d.DeleteList(t.Context(), "ops"), "ops")
		if got := names(mustLists(t, d)); !slices.Equal(got, []string{"dev"}) {
			t.Errorf("Lists after a delete = %q, want [dev]", got)
		}
		// A deleted name can be used again.
		again := ports.List{Name: "ops", Type: "webhook", Targets: []string{"env:HOOK"}}
		mustPutList(t, d, again)
		checkList(t, "List of a list put again", again, mustList(t, d, "ops"))
	})

	t.Run("NamesAreExact", func(t *testing.T) {
		d := newDirectory(t)
		lower := ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.test"}}
		upper := ports.List{Name: "Ops", Type: "webhook", Targets: []string{"env:HOOK"}}
		mustPutList(t, d, lower, upper)
		checkList(t, "List(ops)", lower, mustList(t, d, "ops"))
		checkList(t, "List(Ops)", upper, mustList(t, d, "Ops"))
		for _, name := range []string{"OPS", "ops ", " ops", "op"} {
			_, err := d.List(t.Context(), name)
			checkNotFound(t, fmt.Sprintf("List(%q)", name), err, name)
		}
	})

	t.Run("Sorted", func(t *testing.T) {
		d := newDirectory(t)
		// Byte order: upper case before lower case, "a" before "a-1",
		// multi-byte letters last.
		want := []string{"B", "Z", "a", "a-1", "a_1", "b", "é", "日本"}
		for _, i := range []int{3, 7, 0, 5, 2, 6, 1, 4} {
			mustPutList(t, d, ports.List{Name: want[i], Type: "email"})
		}
		if got := names(mustLists(t, d)); !slices.Equal(got, want) {
			t.Errorf("Lists names = %q, want %q", got, want)
		}
	})

	t.Run("Copies", func(t *testing.T) {
		d := newDirectory(t)
		targets := []string{"a@example.test", "b@example.test"}
		mustPutList(t, d, ports.List{Name: "ops", Type: "email", Targets: targets})
		targets[0] = "mallory@example.test" // the caller's slice after Put
		l := mustList(t, d, "ops")
		l.Targets[1] = "eve@example.test" // a returned slice
		all := mustLists(t, d)
		all[0].Targets[0] = "trudy@example.test"
		all[0].Name = "renamed"
		want := ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.test", "b@example.test"}}
		checkList(t, "List after changing values handed in and out", want, mustList(t, d, "ops"))
		checkList(t, "Lists after changing values handed in and out", want, mustLists(t, d)[0])
	})

	t.Run("Invalid", func(t *testing.T) {
		long := strings.Repeat("x", ports.MaxDirectoryNameBytes+1)
		tests := []struct {
			name   string
			l      ports.List
			fields []string
		}{
			{"empty name", ports.List{Type: "email"}, []string{"name"}},
			{"blank name", ports.List{Name: "  ", Type: "email"}, []string{"name"}},
			{"name with spaces around", ports.List{Name: " ops", Type: "email"}, []string{"name"}},
			{"name over the limit", ports.List{Name: long, Type: "email"}, []string{"name"}},
			{"name not UTF-8", ports.List{Name: "ops\xff", Type: "email"}, []string{"name"}},
			{"name with a NUL byte", ports.List{Name: "o\x00ps", Type: "email"}, []string{"name"}},
			{"no type", ports.List{Name: "ops", Targets: []string{"a@example.test"}}, []string{"type"}},
			{"type with spaces around", ports.List{Name: "ops", Type: "email "}, []string{"type"}},
			{"blank target", ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.test", " "}}, []string{"targets[1]"}},
			{"target not UTF-8", ports.List{Name: "ops", Type: "email", Targets: []string{"a\xff@example.test"}}, []string{"targets[0]"}},
			{"reference naming nothing", ports.List{Name: "ops", Type: "webhook", Targets: []string{"env:", "file: "}}, []string{"targets[0]", "targets[1]"}},
			{"every rule at once", ports.List{Name: "", Type: "", Targets: []string{"", "x@example.test", "env:"}},
				[]string{"name", "type", "targets[0]", "targets[2]"}},
		}
		d := newDirectory(t)
		old := ports.List{Name: "ops", Type: "email", Targets: []string{"keep@example.test"}}
		mustPutList(t, d, old)
		for _, tt := range tests {
			err := d.PutList(t.Context(), tt.l)
			checkInvalid(t, "PutList of a list with "+tt.name, err, tt.fields, "x@example.test", "a@example.test", "a\xff@example.test")
		}
		// Nothing was written: neither new lists nor a replacement of ops.
		all := mustLists(t, d)
		if len(all) != 1 {
			t.Fatalf("Lists after refused puts = %q, want only ops", names(all))
		}
		checkList(t, "ops after refused replacements", old, all[0])
	})
}

// --- channels ----------------------------------------------------------------

func exerciseChannels(t *testing.T, newDirectory func(t *testing.T) ports.DirectoryAdmin) {
	t.Run("RoundTrip", func(t *testing.T) {
		d := newDirectory(t)
		full := ports.ChannelSettings{
			Type: "email",
			Settings: map[string]string{
				"host":          "smtp.example.test",
				"port":          "587",
				"tls":           "starttls",
				"from":          `Outbox "ünïcödé" <outbox@example.test>`,
				"password":      "env:SMTP_PASSWORD",
				"client_secret": "file:/run/secrets/client secret",
				"api_key":       "", // an unset secret is not a secret in clear
				"empty":         "",
				"quote's":       `back\slash`,
			},
			Retry: ports.RetrySettings{
				Backoff:     ports.BackoffExponential,
				MaxRetries:  12,
				Interval:    1500 * time.Millisecond,
				MaxInterval: 2*time.Hour + 3*time.Millisecond,
			},
			RateLimit: 1.0 / 3.0,
		}
		fixed := ports.ChannelSettings{
			Type:      "webhook",
			Settings:  map[string]string{"timeout": "10s"},
			Retry:     ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: math.MaxInt32 + 1, Interval: time.Minute},
			RateLimit: 1e6,
		}
		zero := ports.ChannelSettings{Type: "slack"}
		mustPutChannel(t, d, full, fixed, zero)
		checkChannel(t, "ChannelSettings of full settings", full, mustChannel(t, d, "email"))
		checkChannel(t, "ChannelSettings of fixed settings", fixed, mustChannel(t, d, "webhook"))
		got := mustChannel(t, d, "slack")
		checkChannel(t, "ChannelSettings of zero settings", zero, got)
		if len(got.Settings) != 0 {
			t.Errorf("zero settings came back with settings %q", got.Settings)
		}
		all := mustChannels(t, d)
		if len(all) != 3 {
			t.Fatalf("Channels = %q, want 3", types(all))
		}
		checkChannel(t, "Channels", full, all[0])
		checkChannel(t, "Channels", zero, all[1])
		checkChannel(t, "Channels", fixed, all[2])
	})

	t.Run("PutReplaces", func(t *testing.T) {
		d := newDirectory(t)
		mustPutChannel(t, d, ports.ChannelSettings{
			Type:      "email",
			Settings:  map[string]string{"host": "old.example.test", "port": "25"},
			Retry:     ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 3, Interval: time.Second, MaxInterval: time.Minute},
			RateLimit: 5,
		})
		next := ports.ChannelSettings{Type: "email", Settings: map[string]string{"host": "new.example.test"}}
		mustPutChannel(t, d, next)
		checkChannel(t, "ChannelSettings after a replace", next, mustChannel(t, d, "email"))
		if all := mustChannels(t, d); len(all) != 1 {
			t.Errorf("Channels after a replace = %q, want one", types(all))
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		d := newDirectory(t)
		_, err := d.ChannelSettings(t.Context(), "pager")
		checkNotFound(t, "ChannelSettings of an absent type", err, "pager")
		checkNotFound(t, "DeleteChannel of an absent type", d.DeleteChannel(t.Context(), "pager"), "pager")
		if all := mustChannels(t, d); len(all) != 0 {
			t.Errorf("Channels of an empty directory = %q", types(all))
		}
		// A list of a type does not make settings of that type.
		mustPutList(t, d, ports.List{Name: "ops", Type: "email"})
		_, err = d.ChannelSettings(t.Context(), "email")
		checkNotFound(t, "ChannelSettings of a type only a list names", err, "email")
	})

	t.Run("Delete", func(t *testing.T) {
		d := newDirectory(t)
		mustPutChannel(t, d, ports.ChannelSettings{Type: "email"}, ports.ChannelSettings{Type: "slack"})
		if err := d.DeleteChannel(t.Context(), "email"); err != nil {
			t.Fatalf("DeleteChannel(email): %v", err)
		}
		_, err := d.ChannelSettings(t.Context(), "email")
		checkNotFound(t, "ChannelSettings of deleted settings", err, "email")
		checkNotFound(t, "second DeleteChannel", d.DeleteChannel(t.Context(), "email"), "email")
		if got := types(mustChannels(t, d)); !slices.Equal(got, []string{"slack"}) {
			t.Errorf("Channels after a delete = %q, want [slack]", got)
		}
	})

	t.Run("TypesAreExact", func(t *testing.T) {
		d := newDirectory(t)
		lower := ports.ChannelSettings{Type: "email", RateLimit: 1}
		upper := ports.ChannelSettings{Type: "Email", RateLimit: 2}
		mustPutChannel(t, d, lower, upper)
		checkChannel(t, "ChannelSettings(email)", lower, mustChannel(t, d, "email"))
		checkChannel(t, "ChannelSettings(Email)", upper, mustChannel(t, d, "Email"))
		_, err := d.ChannelSettings(t.Context(), "EMAIL")
		checkNotFound(t, "ChannelSettings(EMAIL)", err, "EMAIL")
	})

	t.Run("Sorted", func(t *testing.T) {
		d := newDirectory(t)
		want := []string{"Teams", "email", "sms", "webhook", "webhook-v2", "ω"}
		for _, i := range []int{3, 5, 1, 0, 4, 2} {
			mustPutChannel(t, d, ports.ChannelSettings{Type: want[i]})
		}
		if got := types(mustChannels(t, d)); !slices.Equal(got, want) {
			t.Errorf("Channels types = %q, want %q", got, want)
		}
	})

	t.Run("Copies", func(t *testing.T) {
		d := newDirectory(t)
		settings := map[string]string{"host": "smtp.example.test"}
		mustPutChannel(t, d, ports.ChannelSettings{Type: "email", Settings: settings})
		settings["host"] = "evil.example.test" // the caller's map after Put
		settings["extra"] = "x"
		c := mustChannel(t, d, "email")
		c.Settings["host"] = "evil2.example.test" // a returned map
		all := mustChannels(t, d)
		all[0].Settings["host"] = "evil3.example.test"
		want := ports.ChannelSettings{Type: "email", Settings: map[string]string{"host": "smtp.example.test"}}
		checkChannel(t, "ChannelSettings after changing values handed in and out", want, mustChannel(t, d, "email"))
		checkChannel(t, "Channels after changing values handed in and out", want, mustChannels(t, d)[0])
	})

	t.Run("SecretReferences", func(t *testing.T) {
		d := newDirectory(t)
		// References are accepted for every secret key, and a key naming
		// an address is no secret.
		ok := ports.ChannelSettings{Type: "webhook", Settings: map[string]string{
			"token":           "env:HOOK_TOKEN",
			"SMTP_PASSWORD":   "file:/run/secrets/smtp",
			"api-key":         "env:K",
			"oauth_token_url": "https://auth.example.test/token",
		}}
		mustPutChannel(t, d, ok)
		checkChannel(t, "ChannelSettings with references", ok, mustChannel(t, d, "webhook"))

		for key, value := range map[string]string{
			"password":      "hunter2",
			"client_secret": "s3cr3t-value",
			"token":         "env:", // a reference naming nothing is clear text
			"ApiKey":        "AKIA-clear",
		} {
			c := ports.ChannelSettings{Type: "webhook", Settings: map[string]string{"url": "https://x.example.test", key: value}}
			var secrets []string
			if len(value) > len("env:") {
				secrets = append(secrets, value) // "env:" is in the message anyway
			}
			checkInvalid(t, fmt.Sprintf("PutChannel with %s in clear", key), d.PutChannel(t.Context(), c),
				[]string{"settings." + key}, secrets...)
		}
		checkChannel(t, "ChannelSettings after refused puts", ok, mustChannel(t, d, "webhook"))
	})

	t.Run("Invalid", func(t *testing.T) {
		long := strings.Repeat("x", ports.MaxDirectoryNameBytes+1)
		tests := []struct {
			name   string
			c      ports.ChannelSettings
			fields []string
		}{
			{"no type", ports.ChannelSettings{}, []string{"type"}},
			{"type with spaces around", ports.ChannelSettings{Type: "email "}, []string{"type"}},
			{"type over the limit", ports.ChannelSettings{Type: long}, []string{"type"}},
			{"type not UTF-8", ports.ChannelSettings{Type: "e\xffmail"}, []string{"type"}},
			{"unknown backoff", ports.ChannelSettings{Type: "email", Retry: ports.RetrySettings{Backoff: "linear"}}, []string{"retry.backoff"}},
			{"negative retry settings", ports.ChannelSettings{Type: "email", Retry: ports.RetrySettings{
				MaxRetries: -1, Interval: -time.Second, MaxInterval: -time.Minute}},
				[]string{"retry.max_retries", "retry.interval", "retry.max_interval"}},
			{"intervals finer than a millisecond", ports.ChannelSettings{Type: "email", Retry: ports.RetrySettings{
				Interval: 1500 * time.Microsecond, MaxInterval: time.Minute + time.Nanosecond}},
				[]string{"retry.interval", "retry.max_interval"}},
			{"exponential max below interval", ports.ChannelSettings{Type: "email", Retry: ports.RetrySettings{
				Backoff: ports.BackoffExponential, Interval: time.Minute, MaxInterval: time.Second}},
				[]string{"retry.max_interval"}},
			{"negative rate limit", ports.ChannelSettings{Type: "email", RateLimit: -1}, []string{"rate_limit"}},
			{"infinite rate limit", ports.ChannelSettings{Type: "email", RateLimit: math.Inf(1)}, []string{"rate_limit"}},
			{"NaN rate limit", ports.ChannelSettings{Type: "email", RateLimit: math.NaN()}, []string{"rate_limit"}},
			{"empty setting name", ports.ChannelSettings{Type: "email", Settings: map[string]string{"": "x"}}, []string{"settings"}},
			{"setting value not UTF-8", ports.ChannelSettings{Type: "email", Settings: map[string]string{"from": "a\xff"}}, []string{"settings.from"}},
			{"every rule at once", ports.ChannelSettings{Type: "", RateLimit: -2, Retry: ports.RetrySettings{Backoff: "x"},
				Settings: map[string]string{"password": "hunter2"}},
				[]string{"type", "rate_limit", "retry.backoff", "settings.password"}},
		}
		d := newDirectory(t)
		old := ports.ChannelSettings{Type: "email", Settings: map[string]string{"host": "keep.example.test"}, RateLimit: 7}
		mustPutChannel(t, d, old)
		for _, tt := range tests {
			checkInvalid(t, "PutChannel with "+tt.name, d.PutChannel(t.Context(), tt.c), tt.fields, "hunter2")
		}
		all := mustChannels(t, d)
		if len(all) != 1 {
			t.Fatalf("Channels after refused puts = %q, want only email", types(all))
		}
		checkChannel(t, "email after refused replacements", old, all[0])
	})
}

// --- concurrency -------------------------------------------------------------

// exerciseConcurrent puts and reads from many goroutines at once: every read
// sees a whole version of a value (never a mix of two puts), and every put
// lands.
func exerciseConcurrent(t *testing.T, newDirectory func(t *testing.T) ports.DirectoryAdmin) {
	d := newDirectory(t)
	const workers, rounds = 8, 12
	// Two whole versions of the shared list and channel; every put writes
	// one of them.
	listVersions := []ports.List{
		{Name: "shared", Type: "email", Targets: []string{"a@example.test", "b@example.test"}},
		{Name: "shared", Type: "webhook", Targets: []string{"env:HOOK_1", "env:HOOK_2", "env:HOOK_3"}},
	}
	channelVersions := []ports.ChannelSettings{
		{Type: "shared", Settings: map[string]string{"v": "0"}, Retry: ports.RetrySettings{MaxRetries: 1, Interval: time.Second}, RateLimit: 1},
		{Type: "shared", Settings: map[string]string{"v": "1", "w": "1"}, Retry: ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 2, Interval: time.Minute}, RateLimit: 2},
	}
	mustPutList(t, d, listVersions[0])
	mustPutChannel(t, d, channelVersions[0])

	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*6)
	for w := range workers {
		wg.Go(func() {
			ctx := t.Context()
			for r := range rounds {
				v := (w + r) % 2
				if err := d.PutList(ctx, listVersions[v]); err != nil {
					errs <- fmt.Errorf("PutList(shared): %w", err)
				}
				if err := d.PutChannel(ctx, channelVersions[v]); err != nil {
					errs <- fmt.Errorf("PutChannel(shared): %w", err)
				}
				own := ports.List{Name: fmt.Sprintf("w%d-r%02d", w, r), Type: "email", Targets: []string{fmt.Sprintf("w%d@example.test", w)}}
				if err := d.PutList(ctx, own); err != nil {
					errs <- fmt.Errorf("PutList(%s): %w", own.Name, err)
				}
				if l, err := d.List(ctx, "shared"); err != nil {
					errs <- fmt.Errorf("List(shared): %w", err)
				} else if len(DiffList(listVersions[0], l)) > 0 && len(DiffList(listVersions[1], l)) > 0 {
					errs <- fmt.Errorf("List(shared) = %+v, which no put wrote", l)
				}
				if c, err := d.ChannelSettings(ctx, "shared"); err != nil {
					errs <- fmt.Errorf("ChannelSettings(shared): %w", err)
				} else if len(DiffChannel(channelVersions[0], c)) > 0 && len(DiffChannel(channelVersions[1], c)) > 0 {
					errs <- fmt.Errorf("ChannelSettings(shared) = %+v, which no put wrote", c)
				}
				if r%4 == 0 {
					if _, err := d.Lists(ctx); err != nil {
						errs <- fmt.Errorf("lists: %w", err)
					}
					if _, err := d.Channels(ctx); err != nil {
						errs <- fmt.Errorf("channels: %w", err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := []string{"shared"}
	for w := range workers {
		for r := range rounds {
			want = append(want, fmt.Sprintf("w%d-r%02d", w, r))
		}
	}
	slices.Sort(want)
	if got := names(mustLists(t, d)); !reflect.DeepEqual(got, want) {
		t.Errorf("Lists after concurrent puts = %d names, want %d:\n  got  %q\n  want %q", len(got), len(want), got, want)
	}
}
