package raftbuffer

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogger is the hclog.Logger raft writes to, forwarding to slog. Raft is
// chatty below Info, so its Trace and Debug lines both become slog Debug;
// Info, Warn and Error keep their level.
type hclogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogger)(nil)

func newHclogger(l *slog.Logger) hclog.Logger { return &hclogger{l: l} }

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log writes one line at level.
func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	if !h.l.Enabled(context.Background(), lv) {
		return
	}
	if h.name != "" {
		args = append(args, "logger", h.name)
	}
	h.l.Log(context.Background(), lv, msg, args...)
}

// Trace logs at slog Debug.
func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }

// Debug logs at slog Debug.
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }

// Info logs at slog Info.
func (h *hclogger) Info(msg string, args ...any) { h.Log(hclog.Info, msg, args...) }

// Warn logs at slog Warn.
func (h *hclogger) Warn(msg string, args ...any) { h.Log(hclog.Warn, msg, args...) }

// Error logs at slog Error.
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(l hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(l))
}

// IsTrace reports whether slog takes Debug lines.
func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }

// IsDebug reports whether slog takes Debug lines.
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }

// IsInfo reports whether slog takes Info lines.
func (h *hclogger) IsInfo() bool { return h.enabled(hclog.Info) }

// IsWarn reports whether slog takes Warn lines.
func (h *hclogger) IsWarn() bool { return h.enabled(hclog.Warn) }

// IsError reports whether slog takes Error lines.
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

// ImpliedArgs returns the arguments added by With.
func (h *hclogger) ImpliedArgs() []any { return h.implied }

// With returns a logger that adds args to every line.
func (h *hclogger) With(args ...any) hclog.Logger {
	return &hclogger{l: h.l.With(args...), name: h.name, implied: append(append([]any(nil), h.implied...), args...)}
}

// Name returns the logger's name.
func (h *hclogger) Name() string { return h.name }

// Named returns a logger whose name has name appended.
func (h *hclogger) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &hclogger{l: h.l, name: n, implied: h.implied}
}

// ResetNamed returns a logger named name.
func (h *hclogger) ResetNamed(name string) hclog.Logger {
	return &hclogger{l: h.l, name: name, implied: h.implied}
}

// SetLevel does nothing: the slog handler decides what is logged.
func (h *hclogger) SetLevel(hclog.Level) {}

// GetLevel reports the most verbose level the slog handler takes.
func (h *hclogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

// StandardLogger returns a log.Logger writing at slog Info.
func (h *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines go to slog at Info.
func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
