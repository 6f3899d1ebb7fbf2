package main

import (
	"io"
	"log/slog"
	"time"

	"github.com/lmittmann/tint"

	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/cmd/outbox/internal/logmask"
)

// newLogger builds the process logger writing to w. Format auto picks tinted
// text when w is a terminal and JSON otherwise; text and json force one.
// The text is coloured only when color is true (see loggerFor: a terminal,
// and NO_COLOR unset).
// Every handler is wrapped in logmask's, so e-mail addresses and secrets
// never reach the output.
func newLogger(cfg LogConfig, w io.Writer, terminal, color bool) *slog.Logger {
	level := parseLevel(cfg.Level)
	var h slog.Handler
	switch {
	case cfg.Format == "json" || cfg.Format != "text" && !terminal:
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	default:
		h = tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.DateTime, NoColor: !color})
	}
	return slog.New(logmask.New(h))
}

// loggerFor is newLogger for the process's stderr: auto is text on a
// terminal, coloured unless NO_COLOR is set non-empty.
func loggerFor(cfg LogConfig, stderr io.Writer, environ []string) *slog.Logger {
	return loggerOn(cfg, stderr, environ, isTerminal(stderr))
}

// loggerOn is loggerFor with whether w is a terminal given (a test has
// none): NO_COLOR in environ turns the colour off.
func loggerOn(cfg LogConfig, w io.Writer, environ []string, terminal bool) *slog.Logger {
	return newLogger(cfg, w, terminal, cli.Color(environ, terminal))
}

// parseLevel maps a validated log.level to a slog.Level.
func parseLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
