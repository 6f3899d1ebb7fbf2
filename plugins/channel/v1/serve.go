package channel

import (
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/siteline/outbox/adapters/harden"
)

// stderr is the process's standard error as it was at start. plugin.Serve
// replaces os.Stderr by a pipe; log lines must go to the original, which
// central reads and parses.
var stderr = os.Stderr

// drainTimeout is how long, at least, a plugin process told to stop
// (SIGTERM) waits for the deliveries in flight. Each runs under its own
// timeout, which central sets (delivery_timeout, 30 s by default); the drain
// waits until the latest of them has passed (plus a margin), however long,
// and drainTimeout for a delivery that came without one.
const drainTimeout = 30 * time.Second

// exitGrace is how long after its last delivery a drained plugin process
// waits for central to close the connection (go-plugin's Kill) before it
// exits on its own. Central closes it once it has every result of the
// drained deliveries; a process that exited first could lose the last of
// them in transit.
const exitGrace = 5 * time.Second

// Exit statuses of a plugin process that Serve ends itself.
const (
	exitStopped    = 0 // SIGTERM, once the deliveries in flight ended
	exitParentGone = 3 // central is gone
)

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
//
// The process never outlives central: every half second it checks that
// central is still there (its parent process is the one that started it,
// and its standard error still has a reader, see parentGone) and exits with
// status 3 when it is not, however central ended, kill -9 included. A
// delivery in flight then is cut off; central, gone, could not have recorded
// its outcome anyway, and delivers it again once its lease expires.
//
// SIGTERM stops the process cleanly: it refuses new deliveries (central
// takes them as never started, and sends them to the plugin's next process),
// waits for those in flight to end (at most 30 s), then for central to close
// the connection once it has their results (at most 5 s after the last
// ended), and exits with status 0. A second SIGTERM ends it at once. SIGINT is ignored, as go-plugin does: a
// Ctrl-C in central's terminal reaches the plugins too, and central stops
// them itself.
func Serve(ch Channel) {
	if err := harden.Undumpable(); err != nil {
		Logger().Warn("cannot make the plugin process unreadable to other processes of its user", "err", err.Error())
	}
	parent := newParentGone(stderr)
	g := &gate{}
	done := make(chan struct{})
	defer close(done)
	go watchParent(parent, parentCheckInterval, done, func(why string) {
		if parent.pipeGone == nil || !parent.pipeGone() {
			// Nobody may read it, but a wrapper may pass it on.
			Logger().Error("central is gone: exiting", "reason", why)
		}
		os.Exit(exitParentGone)
	})
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	defer signal.Stop(terms)
	go stopOnSIGTERM(g, terms, done)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: &GRPCPlugin{Impl: ch, gate: g}},
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

// stopOnSIGTERM waits for a signal on terms (or for done), then drains g,
// waits for central to close the connection (done: Serve returns) at most
// exitGrace, and exits the process if it has not.
func stopOnSIGTERM(g *gate, terms chan os.Signal, done <-chan struct{}) {
	select {
	case <-terms:
	case <-done:
		return
	}
	// A second SIGTERM gets the default behaviour, unless the program
	// catches it elsewhere too.
	signal.Stop(terms)
	g.close()
	log := Logger()
	log.Info("SIGTERM: refusing new deliveries, waiting for those in flight", "at_most", drainTimeout.String())
	if !g.drain(drainTimeout) {
		log.Warn("deliveries still running after the drain timeout: exiting anyway", "timeout", drainTimeout.String())
	}
	// Results sent more than exitGrace ago have reached central.
	wait := exitGrace
	if last := g.lastEnd(); !last.IsZero() {
		wait -= time.Since(last)
	} else {
		wait = 0
	}
	if wait <= 0 {
		os.Exit(exitStopped)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return // central closed the connection: Serve returns
	case <-t.C:
	}
	os.Exit(exitStopped)
}

// Logger returns a logger for a plugin's own log lines. Central receives
// them, with their level and attributes, in its own log, marked with the
// plugin's name. Mind that central masks e-mail addresses, but a plugin
// should never log secrets in the first place.
func Logger() *slog.Logger { return newLogger(stderr) }

// newLogger returns Logger's logger writing to w. A duration is written as
// text with its unit ("took":"197.226µs"), not as JSON's bare count of
// nanoseconds.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		// go-plugin parses JSON lines with hclog's key names.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
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
