//go:build linux

package pluginhost

import (
	"os/exec"
	"syscall"
)

// dieWithCentral asks the kernel to kill the plugin process when central
// dies (the parent-death signal, PR_SET_PDEATHSIG), however it dies: kill -9,
// a crash, the OOM killer. go-plugin starts the exec.Cmd it is given as it
// is, SysProcAttr included.
//
// Caveats, all covered by the check every plugin built with the SDK makes
// itself (channel.Serve watches its parent and its standard error):
//   - The signal fires when the OS thread that started the process ends, not
//     the process. Go ends a thread when a goroutine locked to it exits, so
//     each plugin is started from a thread of its own that lives until the
//     host closes (spawner).
//   - The kernel clears it when the process execs a set-user-ID or
//     set-group-ID binary or one with file capabilities (sudo), and when it
//     changes its user or group ids (setpriv --reuid): a plugin run as
//     another user through a wrapper is not covered by it.
//   - It is Linux only.
func dieWithCentral(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
