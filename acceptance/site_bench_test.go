package acceptance

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The site benchmarks run a three-voter group (a pair plus a
// witness) of real `outbox site` processes, built without the race detector
// whatever the tests run with, and send through one notify client as scripts
// do. Central runs in this process.
//
//	go test ./acceptance -run '^$' -bench 'BenchmarkSiteSend$' -benchtime 20000x
//	go test ./acceptance -run '^$' -bench BenchmarkSiteSendLatency -benchtime 3000x
//	go test ./acceptance -run '^$' -bench BenchmarkSiteMemory -benchtime 1x -timeout 30m
//
// The memory benchmark fills for minutes (about 5 at 3,500 Sends/s), past
// go test's default 10-minute timeout with the others: give -timeout.

// benchSubject and benchBody are a notification of the usual size: a
// subject of about 30 bytes, a body of about 100.
func benchSubject(i int64) string { return fmt.Sprintf("Tank %08d level high alarm", i) }

const benchBody = "Level 93% at 08:00 on tank 3, line 2; the high alarm threshold is 90%. Operator on shift: check it."

// benchSite starts central and a three-voter site group for a benchmark and
// waits for a leader.
func benchSite(b *testing.B, centralUp bool) (*centralLink, *siteGroup, *siteNode) {
	b.Helper()
	c := newCentral(b)
	if centralUp {
		c.up()
	}
	spec := threeVoters
	spec.Race = false
	g := newSiteGroup(b, c, spec)
	g.startAll()
	leader := g.leader()
	// One Send through the client, so that its connections are up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.client.To("ops").Send(ctx, "warm-up", benchBody); err != nil {
		b.Fatal(err)
	}
	return c, g, leader
}

// centralStates runs f with central up — the steady state: the leader
// forwards each Send and removes it from the buffer through Raft, which
// doubles the Raft traffic — and with central down, which leaves the Sends
// alone on the group (the site's own figure).
func centralStates(b *testing.B, f func(b *testing.B, centralUp bool)) {
	for _, up := range []bool{true, false} {
		name := "central=down"
		if up {
			name = "central=up"
		}
		b.Run(name, func(b *testing.B) { f(b, up) })
	}
}

// BenchmarkSiteSend measures Sends from 64 concurrent callers through
// one client to a three-voter group on loopback. Goal: 10,000 sends/s. It
// logs the CPU each process used ("client" is this process: the callers,
// and central when it is up).
func BenchmarkSiteSend(b *testing.B) { centralStates(b, benchSend) }

func benchSend(b *testing.B, centralUp bool) {
	_, g, _ := benchSite(b, centralUp)
	const callers = 64
	var (
		work   = make(chan int64)
		failed atomic.Int64
		first  atomic.Value
		wg     sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for i := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if _, err := g.client.To("ops").Send(ctx, benchSubject(i), benchBody); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
				cancel()
			}
		})
	}
	cpu := startCPU(b, g)
	var i int64
	for b.Loop() {
		work <- i
		i++
	}
	close(work)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d Sends failed; the first: %v", n, first.Load())
	}
	cpu.log(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
}

// cpuMeter records the CPU time the nodes and this process use.
type cpuMeter struct {
	g      *siteGroup
	leader string
	start  time.Time
	before map[string]time.Duration
}

// startCPU starts measuring.
func startCPU(b *testing.B, g *siteGroup) *cpuMeter {
	m := &cpuMeter{g: g, leader: g.leader().id, start: time.Now(), before: cpuTimes(b, g)}
	return m
}

// log logs the CPU each process used since startCPU, as a share of one core.
func (m *cpuMeter) log(b *testing.B) {
	wall := time.Since(m.start)
	after := cpuTimes(b, m.g)
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		role := ""
		if name == m.leader {
			role = " (leader)"
		}
		parts = append(parts, fmt.Sprintf("%s%s %.0f%%", name, role, 100*float64(after[name]-m.before[name])/float64(wall)))
	}
	b.Logf("CPU over %s, as a share of one core: %s", wall.Round(time.Millisecond), strings.Join(parts, ", "))
}

// cpuTimes returns the user+system CPU time of each running node and of
// this process ("client").
func cpuTimes(b *testing.B, g *siteGroup) map[string]time.Duration {
	out := map[string]time.Duration{"client": procCPU(b, "self")}
	for _, n := range g.nodes {
		if n.running() {
			out[n.id] = procCPU(b, strconv.Itoa(n.pid()))
		}
	}
	return out
}

// procCPU reads utime+stime of /proc/PID/stat.
func procCPU(b *testing.B, pid string) time.Duration {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatalf("read the CPU time of process %s: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("/proc/%s/stat: unexpected %q", pid, s)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ
	return time.Duration(ut+st) * time.Second / ticks
}

// BenchmarkSiteSendLatency measures one caller's Sends, one after the
// other, through one client to a three-voter group on loopback. Goal: p50
// ≤ 2 ms.
func BenchmarkSiteSendLatency(b *testing.B) { centralStates(b, benchSendLatency) }

func benchSendLatency(b *testing.B, centralUp bool) {
	_, g, _ := benchSite(b, centralUp)
	var took []time.Duration
	var i int64
	cpu := startCPU(b, g)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		_, err := g.client.To("ops").Send(ctx, benchSubject(i), benchBody)
		took = append(took, time.Since(start))
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu.log(b)
	slices.Sort(took)
	pct := func(p float64) float64 {
		return float64(took[int(p*float64(len(took)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
}

// BenchmarkSiteMemory fills a three-voter group with 1,000,000
// buffered notifications (OUTBOX_BENCH_SITE_ROWS changes the count) while
// central is down, from 64 concurrent callers, then reports the leader's
// resident memory (MB-rss, from VmRSS; MB-hwm, its peak VmHWM) in its two
// parts: MB-rss-anon (RssAnon: the Go heap, stacks and the runtime's own)
// and MB-rss-file (RssFile: pages of mapped files in memory, which here are
// bbolt's read-only mmaps of the Raft log and stable store and of the
// buffer's database, and the binary's own text; the kernel may drop them
// under pressure and read them again), and the disk its data directory
// takes (MB-disk, allocated blocks). Goal: 200 MB RSS.
//
// It fills once, whatever b.N: the fill is the first iteration of b.Loop
// and any later iteration does nothing, so ns/op means nothing here; the
// fill rate is reported as fill-sends/s.
func BenchmarkSiteMemory(b *testing.B) {
	rows := int64(1_000_000)
	if v := os.Getenv("OUTBOX_BENCH_SITE_ROWS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("OUTBOX_BENCH_SITE_ROWS=%q is not a positive count", v)
		}
		rows = n
	}
	_, g, _ := benchSite(b, false)
	toFill := rows - 1 // the warm-up Send is one of them
	filled := false
	var fillTime time.Duration
	for b.Loop() {
		if filled {
			continue
		}
		filled = true
		start := time.Now()
		fill(b, g, toFill)
		fillTime = time.Since(start)
	}
	g.waitBacklog(rows, 10*time.Minute)
	// The leader may have changed while filling; measure the one that leads.
	leader := g.leader()

	mem := procMemory(b, leader.pid())
	disk, files := diskUsage(b, leader.dataDir())
	for _, n := range g.nodes {
		if n != leader {
			m := procMemory(b, n.pid())
			d, _ := diskUsage(b, n.dataDir())
			b.Logf("node %s (follower): VmRSS %.1f MB (RssAnon %.1f, RssFile %.1f), VmHWM %.1f MB, disk %.1f MB",
				n.id, mb(m["VmRSS"]), mb(m["RssAnon"]), mb(m["RssFile"]), mb(m["VmHWM"]), mb(d))
		}
	}
	b.Logf("leader %s holding %d notifications: VmRSS %.1f MB (RssAnon %.1f, RssFile %.1f), VmHWM %.1f MB; disk %.1f MB (%s); filled in %s",
		leader.id, rows, mb(mem["VmRSS"]), mb(mem["RssAnon"]), mb(mem["RssFile"]), mb(mem["VmHWM"]), mb(disk), files,
		fillTime.Round(time.Millisecond))
	b.ReportMetric(mb(mem["VmRSS"]), "MB-rss")
	b.ReportMetric(mb(mem["VmHWM"]), "MB-hwm")
	b.ReportMetric(mb(mem["RssAnon"]), "MB-rss-anon")
	b.ReportMetric(mb(mem["RssFile"]), "MB-rss-file")
	b.ReportMetric(mb(disk), "MB-disk")
	b.ReportMetric(float64(toFill)/fillTime.Seconds(), "fill-sends/s")
}

// fill sends n notifications from 64 callers.
func fill(b *testing.B, g *siteGroup, n int64) {
	b.Helper()
	const callers = 64
	var (
		next   atomic.Int64
		failed atomic.Int64
		first  atomic.Value
		wg     sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if _, err := g.client.To("ops").Send(ctx, benchSubject(i), benchBody); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if k := failed.Load(); k > 0 {
		b.Fatalf("%d Sends failed; the first: %v", k, first.Load())
	}
}

// procMemory returns the memory lines of /proc/PID/status (VmRSS, VmHWM,
// RssAnon, RssFile, …), in bytes. RssFile counts the pages of mapped files
// in memory, such as a bbolt database's.
func procMemory(b *testing.B, pid int) map[string]int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("read the memory of process %d: %v", pid, err)
	}
	defer f.Close()
	out := make(map[string]int64)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(val) // "123456 kB"
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/status: %s: %v", pid, key, err)
		}
		out[key] = kb << 10
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	for _, key := range []string{"VmRSS", "VmHWM", "RssAnon", "RssFile"} {
		if _, ok := out[key]; !ok {
			b.Fatalf("/proc/%d/status has no %s line", pid, key)
		}
	}
	return out
}

// diskUsage returns the bytes allocated to the files under dir (sparse
// files count what they use, not their length), and a summary per file.
func diskUsage(b *testing.B, dir string) (int64, string) {
	b.Helper()
	var total int64
	var parts []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		used := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used = st.Blocks * 512
		}
		total += used
		if d.Type().IsRegular() && used >= 1<<20 {
			rel, _ := filepath.Rel(dir, path)
			parts = append(parts, fmt.Sprintf("%s %.1f", rel, mb(used)))
		}
		return nil
	})
	if err != nil {
		b.Fatalf("disk usage of %s: %v", dir, err)
	}
	return total, strings.Join(parts, ", ")
}

func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }
