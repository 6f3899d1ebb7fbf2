package channel

import (
	"log/slog"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/siteline/outbox/adapters/harden"
)

// stderr is the process's standard error as it was at start. plugin.Serve
// replaces os.Stderr by a pipe; log lines must go to the original, which
// central reads and parses.
var stderr = os.Stderr

// Serve runs ch as a channel plugin and returns when central stops the
// process. It is the whole main function of a plugin:
//
//	func main() { channel.Serve(myChannel{}) }
//
// Started by hand rather than by central, it prints a short explanation and
// exits with status 1.
//
// First it makes the process non-dumpable (Linux PR_SET_DUMPABLE), so that
// no other process of its user — another plugin, when plugins run as
// central's user — can read its memory or /proc/<pid>/environ, where the
// secrets resolved for its deliveries pass. A failure is logged as a warning.
func Serve(ch Channel) {
	if err := harden.Undumpable(); err != nil {
		Logger().Warn("cannot make the plugin process unreadable to other processes of its user", "error", err.Error())
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginMap(ch),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			// A batch is capped at batchBytes by the client; leave room.
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(4*batchBytes))...)
		},
		Logger: hclog.New(&hclog.LoggerOptions{
			Output:     stderr,
			JSONFormat: true,
			Level:      hclog.Info,
		}),
	})
}

// Logger returns a logger for a plugin's own log lines. Central receives
// them, with their level and attributes, in its own log, marked with the
// plugin's name. Mind that central masks e-mail addresses, but a plugin
// should never log secrets in the first place.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		// go-plugin parses JSON lines with hclog's key names.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				// The exact layout go-plugin parses.
				a.Key, a.Value = "@timestamp", slog.StringValue(a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lv, _ := a.Value.Any().(slog.Level)
				a.Key, a.Value = "@level", slog.StringValue(hclogLevel(lv))
			case slog.MessageKey:
				a.Key = "@message"
			}
			return a
		},
	}))
}

// hclogLevel names lv as hclog does.
func hclogLevel(lv slog.Level) string {
	switch {
	case lv >= slog.LevelError:
		return "error"
	case lv >= slog.LevelWarn:
		return "warn"
	case lv >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}
