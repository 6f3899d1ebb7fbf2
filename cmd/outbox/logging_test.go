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
		json     bool
		color    bool
	}{
		{"auto", false, true, false},
		{"auto", true, false, true},
		{"json", true, true, false},
		{"text", false, false, false},
		{"text", true, false, true},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		newLogger(LogConfig{Level: "info", Format: tt.format}, &buf, tt.terminal, tt.terminal).Info("central started", "node_id", "n1")
		out := buf.String()
		isJSON := json.Valid(bytes.TrimSpace(buf.Bytes()))
		hasColor := strings.Contains(out, "\x1b[")
		if isJSON != tt.json || hasColor != tt.color || !strings.Contains(out, "central started") {
			t.Errorf("format %s terminal %v: json %v color %v: %q", tt.format, tt.terminal, isJSON, hasColor, out)
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
