package acceptance

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// busyMeter measures the CPU time a benchmark's work costs: the whole
// machine's busy time (every process, the database server's included; the
// time the hypervisor gave to other guests, steal, is not in it, so the
// figure holds on a shared host where rates swing) and this process's own.
type busyMeter struct {
	machine, self time.Duration
	ok            bool
}

// startBusy reads both clocks.
func startBusy(b *testing.B) busyMeter {
	m, ok := machineBusy()
	return busyMeter{machine: m, self: procCPU(b, "self"), ok: ok}
}

// report adds the CPU per unit of work since startBusy as metrics:
// "cpu-µs/<unit>" (the machine) and "self-cpu-µs/<unit>" (this process).
func (m busyMeter) report(b *testing.B, n int, unit string) {
	b.Helper()
	if n == 0 {
		return
	}
	if busy, ok := machineBusy(); ok && m.ok {
		b.ReportMetric(float64((busy-m.machine).Microseconds())/float64(n), "cpu-µs/"+unit)
	}
	b.ReportMetric(float64((procCPU(b, "self")-m.self).Microseconds())/float64(n), "self-cpu-µs/"+unit)
}

// machineBusy is the time all CPUs spent neither idle, waiting for I/O nor
// stolen, from the first line of /proc/stat; false where there is none.
func machineBusy() (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, false
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: all but idle,
	// iowait and steal.
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 || i == 7 {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += v
	}
	const hz = 100 // USER_HZ
	return time.Duration(ticks) * time.Second / hz, true
}
