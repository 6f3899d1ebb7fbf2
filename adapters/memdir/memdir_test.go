package memdir_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/directorytest"
)

func TestContract(t *testing.T) {
	directorytest.Exercise(t, func(t *testing.T) ports.DirectoryAdmin {
		d, err := memdir.New(nil, nil)
		if err != nil {
			t.Fatalf("New(nil, nil): %v", err)
		}
		return d
	})
}

func TestNewHoldsItsInput(t *testing.T) {
	ctx := context.Background()
	lists := []ports.List{
		{Name: "ops", Type: "email", Targets: []string{"alice@example.com", "bob@example.com"}},
		{Name: "hooks", Type: "webhook", Targets: []string{"env:HOOK_URL"}},
		{Name: "nobody", Type: "email"},
	}
	channels := []ports.ChannelSettings{{
		Type:      "email",
		Settings:  map[string]string{"host": "smtp.example.com", "password": "env:SMTP_PASSWORD"},
		Retry:     ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 5, Interval: time.Second, MaxInterval: time.Minute},
		RateLimit: 100,
	}}
	d, err := memdir.New(lists, channels)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Changing the caller's input after New changes nothing.
	lists[0].Targets[0] = "mallory@example.com"
	channels[0].Settings["host"] = "evil.example.com"

	got, err := d.List(ctx, "ops")
	if err != nil || got.Type != "email" || len(got.Targets) != 2 || got.Targets[0] != "alice@example.com" {
		t.Fatalf("List(ops) = %+v, %v", got, err)
	}
	cs, err := d.ChannelSettings(ctx, "email")
	if err != nil || cs.Settings["host"] != "smtp.example.com" || cs.Retry.MaxRetries != 5 || cs.RateLimit != 100 {
		t.Fatalf("ChannelSettings(email) = %+v, %v", cs, err)
	}
	// A type with a list but no channel settings: not found, the core uses defaults.
	if _, err := d.ChannelSettings(ctx, "webhook"); !errors.Is(err, ports.ErrNotFound) || !strings.Contains(err.Error(), `"webhook"`) {
		t.Fatalf("ChannelSettings(webhook) error = %v, want ErrNotFound naming the type", err)
	}
	all, err := d.Lists(ctx)
	if err != nil || len(all) != 3 || all[0].Name != "hooks" || all[1].Name != "nobody" || all[2].Name != "ops" {
		t.Fatalf("Lists() = %+v, %v", all, err)
	}
}

func TestNewRefuses(t *testing.T) {
	email := func(name string) ports.List {
		return ports.List{Name: name, Type: "email", Targets: []string{"a@example.com"}}
	}
	tests := []struct {
		name     string
		lists    []ports.List
		channels []ports.ChannelSettings
		want     []string // every line expected in the error
	}{
		{
			name:  "empty list name",
			lists: []ports.List{email("ops"), {Name: "", Type: "email"}},
			want:  []string{"lists[1].name: empty"},
		},
		{
			name:  "blank list name",
			lists: []ports.List{{Name: "   ", Type: "email"}},
			want:  []string{"lists[0].name: empty"},
		},
		{
			name:  "list name with spaces around",
			lists: []ports.List{{Name: " ops", Type: "email"}},
			want:  []string{`lists[0].name: " ops" has leading or trailing spaces`},
		},
		{
			name:  "duplicate list names",
			lists: []ports.List{email("ops"), email("dev"), email("ops")},
			want:  []string{`lists[2].name: duplicate list name "ops" (also lists[0])`},
		},
		{
			name:  "list without type",
			lists: []ports.List{{Name: "ops", Targets: []string{"a@example.com"}}},
			want:  []string{`lists[0].type: empty (list "ops" needs a channel type`},
		},
		{
			name:  "blank target",
			lists: []ports.List{{Name: "ops", Type: "email", Targets: []string{"a@example.com", " "}}},
			want:  []string{`lists[0].targets[1]: empty target in list "ops"`},
		},
		{
			name:  "reference target naming nothing",
			lists: []ports.List{{Name: "hooks", Type: "webhook", Targets: []string{"env:HOOK", "file:"}}},
			want:  []string{`lists[0].targets[1]: reference in list "hooks" names nothing (want env:NAME or file:/path)`},
		},
		{
			name:     "channel without type",
			channels: []ports.ChannelSettings{{}},
			want:     []string{"channels[0].type: empty"},
		},
		{
			name:     "duplicate channel types",
			channels: []ports.ChannelSettings{{Type: "email"}, {Type: "email"}},
			want:     []string{`channels[1].type: duplicate channel type "email" (also channels[0])`},
		},
		{
			name:     "unknown backoff",
			channels: []ports.ChannelSettings{{Type: "email", Retry: ports.RetrySettings{Backoff: "linear"}}},
			want:     []string{`channels[0].retry.backoff: unknown backoff "linear" (want fixed or exponential)`},
		},
		{
			name: "negative retry settings",
			channels: []ports.ChannelSettings{{Type: "email", Retry: ports.RetrySettings{
				MaxRetries: -1, Interval: -time.Second, MaxInterval: -time.Minute}}},
			want: []string{
				"channels[0].retry.max_retries: must not be negative, got -1",
				"channels[0].retry.interval: must not be negative, got -1s",
				"channels[0].retry.max_interval: must not be negative, got -1m0s",
			},
		},
		{
			name: "interval finer than a millisecond",
			channels: []ports.ChannelSettings{{Type: "email", Retry: ports.RetrySettings{
				Interval: 1500 * time.Microsecond}}},
			want: []string{"channels[0].retry.interval: 1.5ms is not a whole number of milliseconds"},
		},
		{
			name: "exponential max below interval",
			channels: []ports.ChannelSettings{{Type: "email", Retry: ports.RetrySettings{
				Backoff: ports.BackoffExponential, Interval: time.Minute, MaxInterval: time.Second}}},
			want: []string{"channels[0].retry.max_interval: 1s is below retry.interval 1m0s"},
		},
		{
			name:     "negative rate limit",
			channels: []ports.ChannelSettings{{Type: "email", RateLimit: -1}},
			want:     []string{"channels[0].rate_limit: must be a finite number"},
		},
		{
			name:     "infinite rate limit",
			channels: []ports.ChannelSettings{{Type: "email", RateLimit: math.Inf(1)}},
			want:     []string{"channels[0].rate_limit: must be a finite number"},
		},
		{
			name: "secret in clear",
			channels: []ports.ChannelSettings{{Type: "email", Settings: map[string]string{
				"host": "smtp.example.com", "Password": "hunter2", "client_secret": "env:", "token": "file:/run/secrets/token"}}},
			want: []string{
				"channels[0].settings.Password: secret values must be references (env:NAME or file:/path), not clear text",
				"channels[0].settings.client_secret: secret values must be references",
			},
		},
		{
			name: "every rule at once",
			lists: []ports.List{
				{Name: "", Type: ""},
				email("ops"),
				{Name: "ops"},
			},
			channels: []ports.ChannelSettings{{Type: ""}, {Type: "x", RateLimit: -2}},
			want: []string{
				"lists[0].name: empty",
				"lists[0].type: empty",
				`lists[2].name: duplicate list name "ops" (also lists[1])`,
				`lists[2].type: empty (list "ops"`,
				"channels[0].type: empty",
				"channels[1].rate_limit: must be a finite number",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := memdir.New(tt.lists, tt.channels)
			if err == nil {
				t.Fatalf("New accepted it: %+v", d)
			}
			if d != nil {
				t.Fatalf("New returned a directory with an error")
			}
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("error %v does not wrap ports.ErrInvalid", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error repeats a secret: %v", err)
			}
			var fe *ports.FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Errorf("error %v holds no *ports.FieldError with a field", err)
			}
		})
	}
}

func TestEmpty(t *testing.T) {
	d, err := memdir.New(nil, nil)
	if err != nil {
		t.Fatalf("New(nil, nil): %v", err)
	}
	if _, err := d.List(context.Background(), "ops"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("List on empty directory: %v", err)
	}
}
