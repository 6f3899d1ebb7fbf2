package main

import "golang.org/x/sys/unix"

// undumpable makes this process's memory and its /proc files (environ, mem,
// maps, fd) unreadable to the other processes of its user — a plugin
// included — and keeps it from dumping core: central's environment and
// memory hold its database DSN, the variables env: references read, tokens
// and passwords. Only a process with CAP_SYS_PTRACE (root) still reads them.
func undumpable() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
