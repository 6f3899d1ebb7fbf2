//go:build !linux

package pluginhost

import "os/exec"

// dieWithCentral does nothing here: there is no parent-death signal. A
// plugin built with the SDK still exits when central is gone (channel.Serve
// watches its parent).
func dieWithCentral(*exec.Cmd) {}
