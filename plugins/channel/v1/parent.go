package channel

import (
	"os"
	"time"
)

// parentCheckInterval is how often a plugin process checks that central, the
// process that started it, is still there.
const parentCheckInterval = 500 * time.Millisecond

// parentGone reports whether central, the process that started this plugin,
// is gone. It holds two checks, made every parentCheckInterval:
//
//   - the parent process changed: os.Getppid differs from its value at start.
//     When central dies, the plugin is re-parented (to init or a subreaper),
//     however central died (kill -9 included).
//   - standard error is a pipe nobody reads any more (Unix). go-plugin gives
//     a plugin a pipe as standard error and central alone holds its read
//     end; when central dies the kernel closes it. This covers a wrapper that
//     stays the plugin's parent (sudo), which the first check cannot see
//     through, as long as the wrapper hands its own standard error down (sudo
//     without a pseudo-terminal; with use_pty it relays it, and only its
//     own fate tells).
//
// A central on Linux also asks the kernel to kill a plugin when it dies (the
// parent-death signal, adapters/pluginhost); these checks cover what that
// signal does not: other systems, a plugin behind a wrapper that changes user
// (which clears the signal), a host that does not ask for it.
type parentGone struct {
	ppid int
	// pipeGone reports whether standard error's pipe lost its reader; nil
	// when standard error is no pipe or the system cannot tell.
	pipeGone func() bool
}

// newParentGone records the process's parent and its standard error as they
// are now, at the start of Serve.
func newParentGone(stderr *os.File) *parentGone {
	return &parentGone{ppid: os.Getppid(), pipeGone: pipeReaderGone(stderr)}
}

// check returns why central is gone ("" while it is there).
func (g *parentGone) check() string {
	if os.Getppid() != g.ppid {
		return "the parent process exited"
	}
	if g.pipeGone != nil && g.pipeGone() {
		return "nobody reads the plugin's standard error any more"
	}
	return ""
}

// watchParent checks every interval whether central is gone and, when it
// is, calls exit with the reason. It returns when stop is closed.
func watchParent(g *parentGone, interval time.Duration, stop <-chan struct{}, exit func(reason string)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if why := g.check(); why != "" {
			exit(why)
			return
		}
	}
}
