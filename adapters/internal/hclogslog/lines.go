package hclogslog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Bounds of a plugin's log line as LineWriter takes it.
const (
	// MaxLineBytes bounds one line; a longer one is logged cut, marked
	// with the attribute cut=true.
	MaxLineBytes = 64 << 10
	// MaxAttrs bounds the attributes of one line; the rest are dropped
	// and counted in dropped_attrs.
	MaxAttrs = 32
)

// LineWriter decodes what a plugin process writes to its standard error —
// hclog's JSON lines (what channel.Logger writes) or plain text — into
// records of a *slog.Logger, so that a plugin's lines reach central's log
// with their level, message and attributes. A plugin is an outsider to
// central: no line can panic the writer (go-plugin's own decoder panics on
// {"@message":1}), a line is at most MaxLineBytes and MaxAttrs attributes,
// and a plugin cannot pass a line off as central's own: keys central's log
// gives a meaning (time, level, msg, source and those the logger was given,
// such as channel) come out as plugin.KEY. Text lines are logged at the level
// their prefix names ([ERROR], ...) or Debug; a Go panic's lines at Error.
// Write is for one goroutine at a time, as go-plugin calls it.
type LineWriter struct {
	l        *slog.Logger
	reserved map[string]bool
	carried  map[string]string // reserved keys whose value l carries: a plugin's repeat of it is dropped
	buf      []byte
	cut      bool // the line in buf is over MaxLineBytes: the rest is dropped
	inPanic  bool
}

// NewLineWriter returns a LineWriter logging to l. reserved are the keys of
// the attributes l already carries (With), which a plugin may not set.
func NewLineWriter(l *slog.Logger, reserved ...string) *LineWriter {
	r := map[string]bool{slog.TimeKey: true, slog.LevelKey: true, slog.MessageKey: true, slog.SourceKey: true,
		"logger": true, "cut": true, "dropped_attrs": true}
	for _, k := range reserved {
		r[k] = true
	}
	return &LineWriter{l: l, reserved: r, carried: map[string]string{}}
}

// Carries tells w the value of a reserved key that its logger carries, such
// as channel=<type>. A plugin that tags its lines with the same key and value
// (a channel naming itself) would only repeat it, so that attribute is
// dropped; another value still comes out as plugin.KEY. It returns w.
func (w *LineWriter) Carries(key, value string) *LineWriter {
	w.reserved[key] = true
	w.carried[key] = value
	return w
}

// Write implements io.Writer: it logs every complete line in p and keeps
// the rest for the next Write. It never fails.
func (w *LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := MaxLineBytes - len(w.buf); len(chunk) > room {
			chunk, w.cut = chunk[:max(room, 0)], true
		}
		w.buf = append(w.buf, chunk...)
		if i < 0 {
			break
		}
		w.line(bytes.TrimSuffix(w.buf, []byte{'\r'}), w.cut)
		w.buf, w.cut = w.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}

// Flush logs a last line that had no newline.
func (w *LineWriter) Flush() {
	if len(w.buf) > 0 {
		w.line(w.buf, w.cut)
		w.buf, w.cut = w.buf[:0], false
	}
}

// line logs one line.
func (w *LineWriter) line(b []byte, cut bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	level, msg, attrs := w.decode(b)
	if cut {
		attrs = append(attrs, slog.Bool("cut", true))
	}
	ctx := context.Background()
	if w.l.Enabled(ctx, level) {
		w.l.LogAttrs(ctx, level, msg, attrs...)
	}
}

// decode reads a line as hclog JSON, or as text when it is not.
func (w *LineWriter) decode(b []byte) (slog.Level, string, []slog.Attr) {
	var raw map[string]any
	// A cut line is no JSON: it is logged as text.
	if !w.cut && json.Unmarshal(b, &raw) == nil && raw != nil {
		if lv, ok := raw["@level"].(string); ok {
			if hl := hclog.LevelFromString(lv); hl != hclog.NoLevel {
				w.inPanic = false
				return slogLevel(hl), text(raw["@message"]), w.attrs(raw)
			}
		}
		// JSON, but not hclog's: the line as it is.
		return slog.LevelDebug, string(b), nil
	}
	s := string(b)
	switch {
	case strings.HasPrefix(s, "[TRACE]"):
		return slogLevel(hclog.Trace), s, nil
	case strings.HasPrefix(s, "[DEBUG]"):
		return slog.LevelDebug, s, nil
	case strings.HasPrefix(s, "[INFO]"):
		return slog.LevelInfo, s, nil
	case strings.HasPrefix(s, "[WARN]"):
		return slog.LevelWarn, s, nil
	case strings.HasPrefix(s, "[ERROR]"):
		return slog.LevelError, s, nil
	case strings.HasPrefix(s, "panic: "), strings.HasPrefix(s, "fatal error: "):
		w.inPanic = true
		return slog.LevelError, s, nil
	case w.inPanic:
		return slog.LevelError, s, nil
	}
	return slog.LevelDebug, s, nil
}

// attrs returns the attributes of an hclog JSON line, sorted by key, without
// hclog's own (@level, @message, @timestamp), with reserved keys renamed,
// at most MaxAttrs.
func (w *LineWriter) attrs(raw map[string]any) []slog.Attr {
	delete(raw, "@level")
	delete(raw, "@message")
	delete(raw, "@timestamp")
	keys := slices.Sorted(maps.Keys(raw))
	var out []slog.Attr
	for i, k := range keys {
		if i == MaxAttrs {
			out = append(out, slog.Int("dropped_attrs", len(keys)-MaxAttrs))
			break
		}
		name := strings.TrimPrefix(k, "@") // @module, @caller
		if v, ok := w.carried[name]; ok && raw[k] == v {
			continue // the logger carries it already
		}
		if name == "" || w.reserved[name] {
			name = "plugin." + name
		}
		out = append(out, slog.Any(name, raw[k]))
	}
	return out
}

// text is an hclog message: a string, or whatever else a plugin put there,
// as text.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// MuteNamed returns h with the logger h.Named(name) switched off. go-plugin
// logs what a plugin writes to its standard error through
// logger.Named(<the plugin binary's base name>), decoding each line itself
// (and panicking on some), unless that logger is off: muted, it only copies
// the lines to its Stderr writer, where a LineWriter decodes them.
func MuteNamed(h hclog.Logger, name string) hclog.Logger { return &muted{Logger: h, name: name} }

type muted struct {
	hclog.Logger
	name string
}

func (m *muted) Named(name string) hclog.Logger {
	if name == m.name {
		return New(slog.New(slog.DiscardHandler))
	}
	return &muted{Logger: m.Logger.Named(name), name: m.name}
}

func (m *muted) With(args ...any) hclog.Logger {
	return &muted{Logger: m.Logger.With(args...), name: m.name}
}
