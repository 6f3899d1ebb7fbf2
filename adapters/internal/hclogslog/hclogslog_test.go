package hclogslog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRelevelFollowsWithAndNamed: the relevel function applies to the lines
// of derived loggers too, and lines keep their level otherwise.
func TestRelevelFollowsWithAndNamed(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := func(level hclog.Level, msg string, _ []any) hclog.Level {
		if msg == "benign" {
			return hclog.Info
		}
		return level
	}
	h := New(l, quiet).Named("raft").With("node", "a")
	h.Error("benign", "error", "x")
	h.Error("real trouble")
	h.Trace("too chatty")
	out := buf.String()
	for _, want := range []string{"level=INFO msg=benign", "level=ERROR msg=\"real trouble\"", "logger=raft", "node=a"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "too chatty") {
		t.Errorf("a Trace line passed a Debug handler:\n%s", out)
	}
}

// TestValuesHclogFormatsItself: the values hclog formats itself reach the
// slog line as the text hclog would write (raft logs its configuration as
// hclog.Fmt("%+v", servers)), not as the Go value of hclog's wrapper type;
// a key that is not a string and a value without a key are kept readable.
func TestValuesHclogFormatsItself(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	type server struct{ ID, Address string }
	h := New(l).With("peer", hclog.Fmt("%s@%s", "b", "10.0.0.2"))
	h.Info("configuration",
		"servers", hclog.Fmt("%+v", []server{{"a", "10.0.0.1:7000"}}),
		"flags", hclog.Hex(255), "mode", hclog.Octal(8), "mask", hclog.Binary(5),
		"quoted", hclog.Quote("x y"), "took", 1500*time.Millisecond, 7, "seven", "stray")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	want := map[string]string{
		"servers": "[{ID:a Address:10.0.0.1:7000}]", "peer": "b@10.0.0.2",
		"flags": "0xff", "mode": "010", "mask": "0b101", "quoted": "x y", "took": "1.5s",
		"7": "seven", hclog.MissingKey: "stray",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %#v, want %q\n%s", k, line[k], v, buf.String())
		}
	}
}
