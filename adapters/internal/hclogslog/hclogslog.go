// Package hclogslog adapts log/slog to hclog.Logger, the logger interface of
// HashiCorp's libraries (go-plugin, raft), so that their lines reach the
// product's log with their level and attributes. hclog's Trace becomes a
// level below slog's Debug, which a Debug handler still drops: raft and
// go-plugin are chatty there. LineWriter decodes what a plugin process
// writes to its standard error into the same log, in place of go-plugin's
// own decoder (MuteNamed switches that one off).
package hclogslog

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hclogger is an hclog.Logger that writes to a *slog.Logger.
type hclogger struct {
	l       *slog.Logger
	name    string
	implied []any
	relevel Relevel
}

var _ hclog.Logger = (*hclogger)(nil)

// Relevel decides the level a line is logged at from the level the library
// chose, its message and its arguments: a library may call an ordinary
// event of its own an error.
type Relevel func(level hclog.Level, msg string, args []any) hclog.Level

// New returns an hclog.Logger writing to l. relevel, when given, may change
// the level of each line (the first non-nil one is used).
func New(l *slog.Logger, relevel ...Relevel) hclog.Logger {
	h := &hclogger{l: l}
	for _, r := range relevel {
		if r != nil {
			h.relevel = r
			break
		}
	}
	return h
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if h.relevel != nil {
		level = h.relevel(level, msg, args)
	}
	lv := slogLevel(level)
	if !h.l.Enabled(context.Background(), lv) {
		return
	}
	args = attrs(args)
	if h.name != "" {
		args = append(args, "logger", h.name)
	}
	h.l.Log(context.Background(), lv, msg, args...)
}

// attrs turns hclog's key/value arguments into slog's: the values hclog
// formats itself (hclog.Fmt, Hex, Octal, Binary, Quote) and durations become
// the text hclog would write, a key that is not a string is printed, and a value without a
// key gets hclog's key for it instead of slog's !BADKEY.
func attrs(args []any) []any {
	if len(args) == 0 {
		return args
	}
	out := make([]any, 0, len(args)+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, hclog.MissingKey, value(args[i]))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		out = append(out, key, value(args[i+1]))
	}
	return out
}

// value returns v as hclog would write it, for the types hclog formats
// itself; any other value passes unchanged, for slog to write.
func value(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return "0x" + strconv.FormatUint(uint64(v), 16)
	case hclog.Octal:
		return "0" + strconv.FormatUint(uint64(v), 8)
	case hclog.Binary:
		return "0b" + strconv.FormatUint(uint64(v), 2)
	case hclog.Quote:
		return string(v)
	case hclog.CapturedStacktrace:
		return string(v)
	case time.Duration:
		// As hclog's text writes it; slog's JSON would write nanoseconds.
		return v.String()
	}
	return v
}

func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(l))
}

func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogger) ImpliedArgs() []any { return h.implied }

func (h *hclogger) With(args ...any) hclog.Logger {
	return &hclogger{l: h.l.With(attrs(args)...), name: h.name, implied: append(append([]any(nil), h.implied...), args...), relevel: h.relevel}
}

func (h *hclogger) Name() string { return h.name }

func (h *hclogger) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &hclogger{l: h.l, name: n, implied: h.implied, relevel: h.relevel}
}

func (h *hclogger) ResetNamed(name string) hclog.Logger {
	return &hclogger{l: h.l, name: name, implied: h.implied, relevel: h.relevel}
}

// SetLevel does nothing: the slog handler decides what is logged.
func (h *hclogger) SetLevel(hclog.Level) {}

// GetLevel reports the most verbose level the slog handler takes.
func (h *hclogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (h *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
