package hclogslog_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/internal/hclogslog"
)

// logTo returns a LineWriter logging JSON without times into buf, its
// logger carrying channel=test.
func logTo(buf *bytes.Buffer) *hclogslog.LineWriter {
	h := slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	return hclogslog.NewLineWriter(slog.New(h).With("channel", "test"), "channel")
}

func records(t testing.TB, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not one JSON record: %.200q", line)
		}
		recs = append(recs, rec)
	}
	return recs
}

func TestLineWriter(t *testing.T) {
	var buf bytes.Buffer
	w := logTo(&buf)
	in := `{"@level":"warn","@message":"delivering","@module":"jsonpost","@timestamp":"2026-01-01T00:00:00.000000Z","list":"ops","attempt":3}` + "\n" +
		`{"@level":"info","@message":{"a":1}}` + "\r\n" +
		"[ERROR] text with a level\n" +
		`{"not":"hclog"}` + "\n" +
		"panic: boom\n" +
		"goroutine 1 [running]:\n" +
		"half a li"
	// In pieces, as go-plugin writes: line, then newline.
	for _, part := range strings.SplitAfter(in, "\n") {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	w.Write([]byte("ne"))
	w.Flush()
	want := []map[string]any{
		{"level": "WARN", "msg": "delivering", "channel": "test", "module": "jsonpost", "list": "ops", "attempt": float64(3)},
		{"level": "INFO", "msg": "map[a:1]", "channel": "test"},
		{"level": "ERROR", "msg": "[ERROR] text with a level", "channel": "test"},
		{"level": "DEBUG", "msg": `{"not":"hclog"}`, "channel": "test"},
		{"level": "ERROR", "msg": "panic: boom", "channel": "test"},
		{"level": "ERROR", "msg": "goroutine 1 [running]:", "channel": "test"},
		{"level": "ERROR", "msg": "half a line", "channel": "test"},
	}
	got := records(t, buf.String())
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("record %d: %s = %v, want %v (%v)", i, k, got[i][k], v, got[i])
			}
		}
		if len(got[i]) != len(want[i]) {
			t.Errorf("record %d has other keys: %v", i, got[i])
		}
	}
}

// FuzzLineWriter feeds a plugin's standard error, in two writes split
// anywhere, to a LineWriter: it never panics, writes only whole JSON
// records, keeps the logger's own channel attribute, bounds each record,
// and the split does not change what is logged.
func FuzzLineWriter(f *testing.F) {
	for _, s := range []string{
		`{"@level":"info","@message":1}` + "\n",
		`{"@level":7,"@message":"x"}` + "\n" + `{"@level":"info","@timestamp":42}` + "\n",
		`{"@level":"error","@message":"m","channel":"email","msg":"forged","level":"INFO","":"empty","@":1}` + "\n",
		"panic: x\n\tstack\n" + `{"@level":"debug","@message":"after"}` + "\n",
		"[WARN] w\r\n\n\n[TRACE] t\n",
		`{"@level":"info","@message":"deep","v":[[[[{"a":null}]]]],"n":1e400}` + "\n",
		"\xff\xfe invalid utf-8\n",
		"null\n[]\n\"s\"\n",
	} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		at := int(split) % (len(data) + 1)
		var whole, parts bytes.Buffer
		w := logTo(&whole)
		w.Write(data)
		w.Flush()
		p := logTo(&parts)
		p.Write(data[:at])
		p.Write(data[at:])
		p.Flush()
		if whole.String() != parts.String() {
			t.Fatalf("a split write logs otherwise:\n%s\nvs\n%s", whole.String(), parts.String())
		}
		for _, rec := range records(t, whole.String()) {
			if rec["channel"] != "test" {
				t.Fatalf("channel %v", rec["channel"])
			}
			if s, _ := rec["msg"].(string); len(s) > hclogslog.MaxLineBytes*3 { // JSON may triple a byte (\ufffd)
				t.Fatalf("msg of %d bytes", len(s))
			}
			if len(rec) > hclogslog.MaxAttrs+6 {
				t.Fatalf("%d attributes", len(rec))
			}
		}
	})
}

// TestLineWriterDropsARepeatOfWhatTheLoggerCarries: a plugin that tags its
// lines with channel=<its type>, as the built-in HTTP channels do, does not
// make the key appear twice; another value is kept, under plugin.channel.
func TestLineWriterDropsARepeatOfWhatTheLoggerCarries(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, nil)
	w := hclogslog.NewLineWriter(slog.New(h).With("channel", "slack")).Carries("channel", "slack")
	w.Write([]byte(`{"@level":"info","@message":"posted","channel":"slack","status":200}` + "\n"))
	w.Write([]byte(`{"@level":"info","@message":"odd","channel":"teams"}` + "\n"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines:\n%s", buf.String())
	}
	if n := strings.Count(lines[0], `"channel"`); n != 1 || strings.Contains(lines[0], "plugin.channel") || !strings.Contains(lines[0], `"status":200`) {
		t.Errorf("the plugin's repeat of channel=slack is not dropped (%d channel keys): %s", n, lines[0])
	}
	if !strings.Contains(lines[1], `"channel":"slack"`) || !strings.Contains(lines[1], `"plugin.channel":"teams"`) {
		t.Errorf("another value of channel is not kept as plugin.channel: %s", lines[1])
	}
}
