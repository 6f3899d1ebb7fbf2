package harden

import "golang.org/x/sys/unix"

// Undumpable makes this process's memory and its /proc files (environ, mem,
// maps, fd) unreadable to the other processes of its user, and keeps it from
// dumping core. Central's environment and memory hold its database DSN, the
// variables env: references read, tokens and passwords; a plugin's hold the
// secrets resolved for its deliveries (an SMTP password, a webhook URL's
// token). Another plugin runs as the same user unless a wrapper switches
// users, and could otherwise read them. Only a process with CAP_SYS_PTRACE
// (root) still can. It lasts until the process executes another program.
func Undumpable() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
