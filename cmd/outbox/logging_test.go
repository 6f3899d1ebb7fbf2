package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestLoggerMasks: every logger the binary builds, in every format, is
// wrapped in the masking handler.
func TestLoggerMasks(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		for _, terminal := range []bool{false, true} {
			var buf bytes.Buffer
			newLogger(LogConfig{Level: "info", Format: format}, &buf, terminal, terminal).With("api_token", "tok-123").
				Info("sending to alice@example.com", "password", "hunter2", "err", errors.New("550 bob@example.org unavailable"))
			out := buf.String()
			for _, s := range []string{"alice@example.com", "tok-123", "hunter2", "bob@example.org"} {
				if strings.Contains(out, s) {
					t.Errorf("%s terminal=%v: log holds %q:\n%s", format, terminal, s, out)
				}
			}
			if !strings.Contains(out, "a***@example.com") || !strings.Contains(out, "b***@example.org") {
				t.Errorf("%s terminal=%v: addresses not masked as such:\n%s", format, terminal, out)
			}
		}
	}
}

func TestLogFormats(t *testing.T) {
	tests := []struct {
		format   string
		terminal bool
		environ  []string
		json     bool
		color    bool
	}{
		{"auto", false, nil, true, false},
		{"auto", true, nil, false, true},
		{"auto", true, []string{"NO_COLOR=1"}, false, false},
		{"json", true, nil, true, false},
		{"text", false, nil, false, false},
		{"text", true, nil, false, true},
		{"text", true, []string{"TERM=xterm", "NO_COLOR=true"}, false, false},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		// loggerFor itself, told whether its output is a terminal.
		loggerOn(LogConfig{Level: "info", Format: tt.format}, &buf, tt.environ, tt.terminal).
			Info("central started", "node_id", "n1")
		out := buf.String()
		isJSON := json.Valid(bytes.TrimSpace(buf.Bytes()))
		hasColor := strings.Contains(out, "\x1b[")
		if isJSON != tt.json || hasColor != tt.color || !strings.Contains(out, "central started") {
			t.Errorf("format %s terminal %v %q: json %v color %v: %q", tt.format, tt.terminal, tt.environ, isJSON, hasColor, out)
		}
	}
}

func TestLogLevel(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(LogConfig{Level: "warn", Format: "json"}, &buf, false, false)
	l.Info("hidden")
	l.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "shown") {
		t.Fatalf("warn level: %q", out)
	}
	for _, lv := range logLevels {
		if parseLevel(lv).String() != strings.ToUpper(lv) {
			t.Errorf("parseLevel(%q) = %v", lv, parseLevel(lv))
		}
	}
}
