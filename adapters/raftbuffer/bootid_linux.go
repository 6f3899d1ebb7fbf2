package raftbuffer

import (
	"os"
	"strings"
)

// kernelBootID is the kernel's random boot id, new at every boot; "" if it
// cannot be read.
func kernelBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
