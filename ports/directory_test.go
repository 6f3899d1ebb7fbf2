package ports_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func TestSecretHelpers(t *testing.T) {
	for _, k := range []string{"password", "SMTP_PASSWORD", "client_secret", "token", "oauth_token", "api_key", "ApiKey"} {
		if !ports.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = false", k)
		}
	}
	for _, k := range []string{"host", "port", "from", "tls", "auth", "oauth_token_url", "token_endpoint"} {
		if ports.IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = true", k)
		}
	}
	for v, want := range map[string]bool{"env:X": true, "file:/run/s": true, "env:": false, "file: ": false, "hunter2": false, "": false} {
		if got := ports.IsSecretRef(v); got != want {
			t.Errorf("IsSecretRef(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestValidateAndPrefixFields(t *testing.T) {
	if err := (ports.List{Name: "ops", Type: "webhook", Targets: []string{"https://x.example", "env:HOOK", "file:/run/hook"}}).Validate(); err != nil {
		t.Fatalf("valid list refused: %v", err)
	}
	if err := (ports.ChannelSettings{Type: "email", Settings: map[string]string{"password": "env:P", "token": ""},
		Retry: ports.RetrySettings{Backoff: ports.BackoffExponential, Interval: time.Second}}).Validate(); err != nil {
		t.Fatalf("valid channel settings refused: %v", err)
	}

	err := ports.List{Name: "ops", Targets: []string{"a@example.com", ""}}.Validate()
	got := ports.PrefixFields("lists[3]", err)
	want := "lists[3].type: empty (list \"ops\" needs a channel type such as email)\n" +
		"lists[3].targets[1]: empty target in list \"ops\""
	if got.Error() != want {
		t.Fatalf("prefixed error =\n%s\nwant\n%s", got, want)
	}
	if !errors.Is(got, ports.ErrInvalid) {
		t.Errorf("prefixed error does not wrap ErrInvalid")
	}
	var fe *ports.FieldError
	if !errors.As(got, &fe) || fe.Field != "lists[3].type" {
		t.Errorf("errors.As found %+v, want the field lists[3].type", fe)
	}
	if strings.Contains(got.Error(), "a@example.com") {
		t.Errorf("error repeats a target: %v", got)
	}
	if ports.PrefixFields("x", nil) != nil {
		t.Errorf("PrefixFields of nil is not nil")
	}
	other := errors.New("other")
	if e := ports.PrefixFields("x", other); e == nil || e.Error() != "other" {
		t.Errorf("PrefixFields of a plain error = %v", e)
	}

	err = ports.ChannelSettings{Type: "email", Settings: map[string]string{"password": "hunter2"}}.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.HasPrefix(err.Error(), "settings.password: ") {
		t.Errorf("secret in clear: %v", err)
	}
}

// "." and ".." are no name for a list or a channel type: a URL path naming
// them is normalised away, so nothing could edit or delete what they name.
func TestDotNamesRefused(t *testing.T) {
	for _, n := range []string{".", ".."} {
		err := ports.List{Name: n, Type: "email"}.Validate()
		var fe *ports.FieldError
		if !errors.Is(err, ports.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "name" {
			t.Errorf("list named %q: %v", n, err)
		}
		if err := (ports.List{Name: "ops", Type: n}).Validate(); err == nil {
			t.Errorf("list of type %q accepted", n)
		}
		if err := (ports.ChannelSettings{Type: n}).Validate(); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("channel type %q: %v", n, err)
		}
	}
	for _, n := range []string{".ops", "ops.", "...", "a..b"} {
		if err := (ports.List{Name: n, Type: "email"}).Validate(); err != nil {
			t.Errorf("list named %q refused: %v", n, err)
		}
	}
}
