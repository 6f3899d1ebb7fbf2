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
// time the hypervisor gave to other guests, steal, is not in it) and this
// process's own.
type busyMeter struct{ machine, self time.Duration }

// startBusy reads both clocks.
func startBusy(b *testing.B) busyMeter {
	return busyMeter{machine: machineBusy(b), self: procCPU(b, "self")}
}

// report adds the CPU per unit of work since startBusy as metrics:
// "cpu-µs/<unit>" (the machine) and "self-cpu-µs/<unit>" (this process).
func (m busyMeter) report(b *testing.B, n int, unit string) {
	b.Helper()
	if n == 0 {
		return
	}
	b.ReportMetric(float64((machineBusy(b)-m.machine).Microseconds())/float64(n), "cpu-µs/"+unit)
	b.ReportMetric(float64((procCPU(b, "self")-m.self).Microseconds())/float64(n), "self-cpu-µs/"+unit)
}

// machineBusy is the time all CPUs spent neither idle, waiting for I/O nor
// stolen, from the first line of /proc/stat (as procCPU reads a process's).
func machineBusy(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatalf("read the machine's CPU time: %v", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		b.Fatalf("/proc/stat: unexpected first line %q", line)
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
			b.Fatalf("/proc/stat: %v", err)
		}
		ticks += v
	}
	const hz = 100 // USER_HZ
	return time.Duration(ticks) * time.Second / hz
}
