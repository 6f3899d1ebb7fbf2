package hclogslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

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
