package logmask

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// secretsAndAddresses must never appear in a log line.
var secretsAndAddresses = []string{
	"alice@example.com", "bob.smith@mail.example.org", "carol@example.net", "dave@example.com",
	"erin@example.com", "frank@example.com", "grace@example.com", "heidi@example.com", "ivan@example.com",
	"hunter2", "s3cr3t", "tok-123", "pa55",
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type valuer struct{ addr string }

func (v valuer) LogValue() slog.Value { return slog.StringValue("to " + v.addr) }

type target struct {
	Name    string
	Address string
}

// logEverything writes one record through every path an attribute can take.
func logEverything(logger *slog.Logger) {
	logger = logger.With("list_owner", "alice@example.com", "api_token", "tok-123")
	logger.WithGroup("req").Info("sending to bob.smith@mail.example.org",
		"to", "carol@example.net",
		"err", errors.New("550 mailbox dave@example.com unavailable"),
		"targets", []string{"erin@example.com", "ops"},
		slog.Group("smtp", "from", "frank@example.com", "password", "hunter2"),
		"who", stringer{"grace@example.com"},
		"lazy", valuer{"heidi@example.com"},
		"target", target{Name: "ivan", Address: "ivan@example.com"},
		"dsn", "postgres://outbox:s3cr3t@db.example.com/outbox",
		"conn", "server=db;user id=sa;password=pa55;database=outbox",
		"count", 3,
	)
}

func TestLogsMaskAddressesAndSecrets(t *testing.T) {
	for format, handler := range map[string]func(io.Writer) slog.Handler{
		"json": func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
		"text": func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
	} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			logEverything(slog.New(New(handler(&buf))))
			out := buf.String()
			for _, s := range secretsAndAddresses {
				if strings.Contains(out, s) {
					t.Errorf("log holds %q:\n%s", s, out)
				}
			}
			for _, want := range []string{"b***@mail.example.org", "c***@example.net", "d***@example.com",
				"e***@example.com", "f***@example.com", "g***@example.com", "h***@example.com", "i***@example.com",
				"a***@example.com", "db.example.com", "ops"} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestJSONLogStructure(t *testing.T) {
	var buf bytes.Buffer
	logEverything(slog.New(New(slog.NewJSONHandler(&buf, nil))))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, buf.String())
	}
	if rec["msg"] != "sending to b***@mail.example.org" || rec["list_owner"] != "a***@example.com" || rec["api_token"] != "***" {
		t.Fatalf("record = %v", rec)
	}
	req, _ := rec["req"].(map[string]any)
	smtp, _ := req["smtp"].(map[string]any)
	if req["to"] != "c***@example.net" || smtp["password"] != "***" || req["count"] != float64(3) {
		t.Fatalf("group req = %v", req)
	}
	if ts, _ := req["targets"].([]any); len(ts) != 2 || ts[0] != "e***@example.com" || ts[1] != "ops" {
		t.Fatalf("targets = %v", req["targets"])
	}
	if req["dsn"] != "postgres://outbox:***@db.example.com/outbox" {
		t.Fatalf("dsn = %v", req["dsn"])
	}
}

func TestMaskText(t *testing.T) {
	for in, want := range map[string]string{
		"alice@example.com":                      "a***@example.com",
		"to=alice@example.com, bob@example.org.": "to=a***@example.com, b***@example.org.",
		"a***@example.com":                       "a***@example.com",
		"no address here":                        "no address here",
		"user@localhost":                         "user@localhost",
		"x@y.io":                                 "x***@y.io",
		"postgres://u:p@h:5432/db":               "postgres://u:***@h:5432/db",
		"postgres://u@h/db":                      "postgres://u@h/db",
		"host=h password=secret user=u":          "host=h password=*** user=u",
		`host=h password='a b\' c' user=u`:       "host=h password=*** user=u",
		`server=s;password="a b";database=d`:     "server=s;password=***;database=d",
		"server=s;password={a; b};database=d":    "server=s;password=***;database=d",
		"Server=h;Password=secret;":              "Server=h;Password=***;",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		if got := Text(Text(in)); got != want {
			t.Errorf("Text twice (%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLogsMaskSecretValuesNotFacts: an attribute named after a secret is
// masked when its value could hold one (text, an error, bytes), and shown
// when it is a fact about one: operators read "password_changed":true, not
// "***".
func TestLogsMaskSecretValuesNotFacts(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(New(slog.NewJSONHandler(&buf, nil)))
	logger.Info("operator account saved", "user", "ann", "password_changed", true, "token_count", 3, "token_ttl", 2*time.Hour,
		"password", "hunter2", "token", []byte("tok-123"), "secret_err", errors.New("s3cr3t"), "api_token_any", any("pa55"))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rec["password_changed"] != true || rec["token_count"] != 3.0 || rec["token_ttl"] != float64(2*time.Hour) {
		t.Errorf("facts masked: %s", buf.String())
	}
	for _, k := range []string{"password", "token", "secret_err", "api_token_any"} {
		if rec[k] != "***" {
			t.Errorf("%s = %v, want ***: %s", k, rec[k], buf.String())
		}
	}
}
