package acceptance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/ports"
)

// BenchmarkSiteCachedCall measures scripts' cached calls to an external
// system through one notify client to a three-voter group of real `outbox
// site` processes (built without the race detector), the system being an
// HTTP server in this process on loopback:
//
//   - target=down: the system answers 503 to every call, so every call is
//     buffered (Pending); 64 concurrent callers. Goal: 5,000 calls/s.
//   - target=up/callers=64: the system answers 201 at once, so every call is
//     Delivered, nothing buffered; 64 concurrent callers.
//   - target=up/callers=1: the same, one call after the other: p50-ms and
//     p99-ms per call.
//
// Each call is one Raft commit: its outcome's tracking row (and, when
// buffered, its message), after the attempt. The systems' retry_interval is
// an hour, so no buffered call is retried while the benchmark runs, and the
// site API's per-caller limit is lifted (as for BenchmarkSiteSend). The
// client lists the leader first, so calls do not pass through a follower.
// Central is down: cached calls do not go through it.
//
//	go test ./acceptance -run '^$' -bench BenchmarkSiteCachedCall -benchtime 20000x
//
// With OUTBOX_BENCH_PERF naming a directory, each sub-benchmark records the
// leader's CPU profile over its measured loop with `perf record -g` (perf
// must be installed and allowed to attach to this user's processes) into
// DIR/<sub-benchmark>.perf.data; `perf report -i FILE` reads it.
func BenchmarkSiteCachedCall(b *testing.B) {
	s := benchOpsSite(b)
	b.Run("target=down", func(b *testing.B) {
		benchCalls(b, s, "down", 64, ports.OpPending)
		if got := s.down.hits.Load(); got < int64(b.N) {
			b.Fatalf("the system down saw %d calls, want at least %d", got, b.N)
		}
	})
	b.Run("target=up/callers=64", func(b *testing.B) {
		benchCalls(b, s, "up", 64, ports.OpDelivered)
	})
	b.Run("target=up/callers=1", func(b *testing.B) {
		benchCallLatency(b, s)
	})
}

// opsSite is the group of the cached-call benchmarks, its two external
// systems, and a client listing the leader first.
type opsSite struct {
	g      *siteGroup
	leader *siteNode
	client *notify.Client
	up     *benchSystem
	down   *benchSystem
	seq    atomic.Int64
}

// benchSystem is an external system in this process answering every call
// with one status.
type benchSystem struct {
	*httptest.Server
	hits atomic.Int64
}

func newBenchSystem(b *testing.B, status int) *benchSystem {
	s := &benchSystem{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"order":"A-1"}`)
	}))
	b.Cleanup(s.Close)
	return s
}

// benchOpsSite starts a three-voter group defining the external systems
// "up" (answers 201) and "down" (answers 503), waits for a leader, and
// makes one call to each so that every connection is up.
func benchOpsSite(b *testing.B) *opsSite {
	b.Helper()
	s := &opsSite{up: newBenchSystem(b, http.StatusCreated), down: newBenchSystem(b, http.StatusServiceUnavailable)}
	c := newCentral(b)
	spec := threeVoters
	spec.Race = false
	s.g = newSiteGroup(b, c, spec)
	// Add the systems to every node's configuration before the start.
	var y strings.Builder
	y.WriteString("external_systems:\n")
	for _, sys := range []struct {
		name string
		srv  *benchSystem
	}{{"up", s.up}, {"down", s.down}} {
		fmt.Fprintf(&y, "  - name: %s\n    base_url: %q\n    timeout: 10s\n    max_retries: 10\n    retry_interval: 1h\n", sys.name, sys.srv.URL)
		y.WriteString("    methods:\n      - {name: order, verb: POST, path: /orders}\n")
	}
	for _, n := range s.g.nodes {
		f, err := os.OpenFile(n.config, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			b.Fatal(err)
		}
		_, err = f.WriteString(y.String())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	s.g.startAll()
	s.leader = s.g.leader()
	addrs := []string{s.leader.api}
	for _, n := range s.g.nodes {
		if n != s.leader {
			addrs = append(addrs, n.api)
		}
	}
	client, err := notify.Dial(strings.Join(addrs, ","))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	s.client = client
	if err := s.call("up", ports.OpDelivered); err != nil {
		b.Fatal(err)
	}
	if err := s.call("down", ports.OpPending); err != nil {
		b.Fatal(err)
	}
	return s
}

// call makes one cached call to system and checks its outcome.
func (s *opsSite) call(system string, want ports.OpStatus) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	i := s.seq.Add(1)
	res, err := s.client.Call(ctx, system, "order", map[string]any{"item": "valve", "qty": 2, "line": i})
	if err != nil {
		return fmt.Errorf("call %s: %w", system, err)
	}
	if res.Operation.Status != want {
		return fmt.Errorf("call %s: %s, want %s (%s)", system, res.Operation.Status, want, res.Operation.LastError)
	}
	return nil
}

// benchCalls makes b.N calls to system from callers goroutines, each
// expecting want, and reports calls/s.
func benchCalls(b *testing.B, s *opsSite, system string, callers int, want ports.OpStatus) {
	var (
		work   = make(chan struct{})
		failed atomic.Int64
		first  atomic.Value
		wg     sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for range work {
				if err := s.call(system, want); err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	prof := startPerf(b, s.leader)
	cpu := startCPU(b, s.g)
	for b.Loop() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	cpu.log(b)
	prof.stop(b)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d calls failed; the first: %v", n, first.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(peakRSS(b, s.leader), "leader-peak-MB")
}

// peakRSS is n's peak resident set size in MB since it started (VmHWM).
func peakRSS(b *testing.B, n *siteNode) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(n.pid()) + "/status")
	if err != nil {
		b.Fatalf("read the memory of node %s: %v", n.id, err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("node %s: VmHWM %q: %v", n.id, v, err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("node %s: no VmHWM in /proc/PID/status", n.id)
	return 0
}

// benchCallLatency makes b.N calls to the system up, one after the other,
// and reports their p50 and p99.
func benchCallLatency(b *testing.B, s *opsSite) {
	took := make([]time.Duration, 0, b.N)
	prof := startPerf(b, s.leader)
	cpu := startCPU(b, s.g)
	for b.Loop() {
		start := time.Now()
		err := s.call("up", ports.OpDelivered)
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	cpu.log(b)
	prof.stop(b)
	slices.Sort(took)
	pct := func(p float64) float64 {
		return float64(took[int(p*float64(len(took)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// perfRun is a `perf record` attached to a node, or nothing when
// OUTBOX_BENCH_PERF is unset.
type perfRun struct {
	node string
	cmd  *exec.Cmd
	out  string
	done chan error
}

// startPerf starts recording n's CPU profile when OUTBOX_BENCH_PERF names
// a directory, and waits until perf has attached.
func startPerf(b *testing.B, n *siteNode) *perfRun {
	dir := os.Getenv("OUTBOX_BENCH_PERF")
	if dir == "" {
		return &perfRun{}
	}
	p := &perfRun{node: n.id, out: filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".perf.data")}
	p.cmd = exec.Command("perf", "record", "-q", "-g", "-F", "499", "-p", strconv.Itoa(n.pid()), "-o", p.out)
	var errOut strings.Builder
	p.cmd.Stderr = &errOut
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("perf record: %v", err)
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait() }() // ends at stop's SIGINT
	// perf attaches within a moment of its start; a profile that misses
	// that moment is only a little shorter.
	select {
	case err := <-p.done:
		b.Fatalf("perf record ended at once: %v\n%s", err, errOut.String())
	case <-time.After(300 * time.Millisecond):
	}
	return p
}

// stop ends the recording and logs where it is.
func (p *perfRun) stop(b *testing.B) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	b.Logf("leader %s's CPU profile: perf report -i %s", p.node, p.out)
}
