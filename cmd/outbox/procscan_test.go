package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// procScanEnv, set to "PID NEEDLE", makes the test binary the scanner of
// the review instead of running the tests (see TestMain): it reads
// /proc/PID/environ and every writable mapping of /proc/PID/mem, looking
// for NEEDLE, and prints one line per file, "environ: found", "environ:
// not found" or "environ: error ...", and the same for mem.
const procScanEnv = "OUTBOX_TEST_PROC_SCAN"

// procScan is the scanner; it returns the exit code.
func procScan(arg string, out io.Writer) int {
	pid, needle, ok := strings.Cut(arg, " ")
	if !ok || needle == "" {
		fmt.Fprintf(out, "%s: want \"PID NEEDLE\"\n", procScanEnv)
		return 2
	}
	report := func(file string, found bool, err error) {
		switch {
		case err != nil:
			fmt.Fprintf(out, "%s: error %v\n", file, err)
		case found:
			fmt.Fprintf(out, "%s: found\n", file)
		default:
			fmt.Fprintf(out, "%s: not found\n", file)
		}
	}
	env, err := os.ReadFile("/proc/" + pid + "/environ")
	report("environ", bytes.Contains(env, []byte(needle)), err)
	found, err := scanMem(pid, []byte(needle))
	report("mem", found, err)
	return 0
}

// scanMem looks for needle in the process's writable mappings, as the
// review's memgrep did.
func scanMem(pid string, needle []byte) (bool, error) {
	mem, err := os.Open("/proc/" + pid + "/mem")
	if err != nil {
		return false, err
	}
	defer mem.Close()
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasPrefix(f[1], "rw") {
			continue
		}
		from, to, _ := strings.Cut(f[0], "-")
		a, err1 := strconv.ParseUint(from, 16, 64)
		b, err2 := strconv.ParseUint(to, 16, 64)
		if err1 != nil || err2 != nil || b <= a || b-a > 1<<30 {
			continue
		}
		buf := make([]byte, b-a)
		n, _ := mem.ReadAt(buf, int64(a))
		if bytes.Contains(buf[:n], needle) {
			return true, nil
		}
	}
	return false, sc.Err()
}
