package acceptance

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/sqlstore/sqlstoretest"
)

// BenchmarkEndToEnd measures the whole path of a notification with every
// part in its own process, as deployed: Sends through the notify client to
// a three-voter site group (`outbox site` processes), forwarded over the
// site link to central (a real `outbox central` process, on PostgreSQL when
// OUTBOX_TEST_POSTGRES_DSN is set, else SQLite), dispatched through the
// built-in e-mail plugin (central's subprocess) with its default settings,
// to a real SMTP server over TCP (smtpcapture, in this process, so that it
// stamps the end of DATA on the same clock as the Sends).
//
// Sends run open loop: one is due at each tick of a steady schedule, each
// in its own goroutine, whether the earlier ones have been answered or not,
// so that a slow path shows as latency rather than as a lower rate. A
// notification's subject carries its sequence number; its latency is the
// end of its DATA at the server less the instant its Send was due by the
// schedule (not when its goroutine got to it: a sending loop that stalls
// and catches up in a burst still counts the stall). Every round waits
// until each accepted notification has arrived (2 minutes at most after
// the last Send), then until the server has received nothing for a second,
// and counts the lost (a Send accepted, never received: must be 0), those
// delivered although their Send failed, and the duplicates: every copy
// beyond the first of any number sent so far, over the whole benchmark, so
// that a late copy of an earlier round's notification counts too (must be
// 0), and messages the benchmark did not send. After the last round the
// benchmark waits for the server to fall quiet again and fails on any
// duplicate that came late.
//
//	go test ./acceptance -run '^$' -bench 'BenchmarkEndToEnd/rate=1000$' -benchtime 20000x
//	go test ./acceptance -run '^$' -bench 'BenchmarkEndToEnd/sweep$' -benchtime 1x
//
// rate=1000 sends b.N notifications at 1,000/s and reports p50-ms, p99-ms,
// max-ms, the rate at which the Sends actually started (sends/s), lost and
// dups; it fails on a lost notification, a duplicate or a failed Send.
// sweep ignores b.N: it sends for 10 s at 1,000/s, then 500/s more at each
// step, until a step's p99 passes 1 s, a notification is lost or
// duplicated, a Send fails or the Sends fall behind the schedule, and
// reports the highest rate that held (max-rate/s; 0 when the first step
// did not). OUTBOX_BENCH_E2E_STEP changes the step's length (a Go
// duration); OUTBOX_BENCH_E2E_POOL sets the e-mail channel's pool_size
// (unset: the channel's default), to compare; OUTBOX_BENCH_E2E_SMTP_DELAY
// (a Go duration, default 3ms) is how long the SMTP server takes before it
// answers the end of DATA, as a relay that commits each message to disk
// first does (0 for an answer at once).
func BenchmarkEndToEnd(b *testing.B) {
	e := startEndToEnd(b)
	defer e.finish(b)
	b.Run("rate=1000", func(b *testing.B) {
		b.ResetTimer()
		r := e.round(b, 1000, b.N)
		b.StopTimer()
		r.report(b)
	})
	b.Run("sweep", func(b *testing.B) {
		step := 10 * time.Second
		if v := os.Getenv("OUTBOX_BENCH_E2E_STEP"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				b.Fatalf("OUTBOX_BENCH_E2E_STEP=%q is not a positive Go duration", v)
			}
			step = d
		}
		best := 0.0
		swept := false
		for b.Loop() {
			if swept {
				continue
			}
			swept = true
			for rate := 1000.0; rate <= 20_000; rate += 500 {
				r := e.round(b, rate, int(rate*step.Seconds()))
				b.Logf("rate %.0f/s: %s", rate, r)
				if !r.holds() {
					break
				}
				best = rate
			}
		}
		b.ReportMetric(best, "max-rate/s")
	})
}

// e2eSubject is the subject of notification seq; e2eSeq reads it back.
func e2eSubject(seq int64) string { return fmt.Sprintf("E2E %09d tank level high alarm", seq) }

func e2eSeq(subject string) (int64, bool) {
	f := strings.Fields(subject)
	if len(f) < 2 || f[0] != "E2E" {
		return 0, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	return n, err == nil
}

// endToEnd is the benchmark's set-up: the SMTP server, central, the site
// group, and what the server received so far, by sequence number.
type endToEnd struct {
	smtp    *smtpcapture.Server
	central *e2eCentral
	site    *siteGroup
	seq     atomic.Int64 // the next sequence number

	scanned  int                   // messages of smtp already read
	received map[int64][]time.Time // the end of DATA of each copy, by sequence number
	strays   int                   // messages received that the benchmark did not send
}

// e2eSMTPDelay is the SMTP server's default wait before it answers the end
// of DATA. A relay answers 250 only once the message is safe on its disk:
// Postfix's cleanup writes and fsyncs the queue file, and passes it between
// processes first. A relay measured on loopback took about 3.3 ms per
// message per connection, where the capture server takes about 0.2 ms
// (BenchmarkEmail, pool=4: 20,000 messages/s over 4 connections); an fsync
// of a small file costs 0.2-0.9 ms on the benchmark machine's disk (write
// cache on) and 1-3 ms on one that flushes. 3 ms brings the capture server
// to that relay's cost.
const e2eSMTPDelay = 3 * time.Millisecond

// e2eQuiet is how long the SMTP server must receive nothing before the
// duplicates are counted: a second copy comes from a delivery that was
// still running when the first copy arrived.
const e2eQuiet = time.Second

// startEndToEnd starts the SMTP server, central and the site group, and
// sends one notification end to end, so that every connection is up.
func startEndToEnd(b *testing.B) *endToEnd {
	b.Helper()
	delay := e2eSMTPDelay
	if v := os.Getenv("OUTBOX_BENCH_E2E_SMTP_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("OUTBOX_BENCH_E2E_SMTP_DELAY=%q is not a Go duration of 0 or more", v)
		}
		delay = d
	}
	srv, err := smtpcapture.Start(smtpcapture.Config{Keep: 1 << 24, DataDelay: delay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	e := &endToEnd{smtp: srv, received: make(map[int64][]time.Time)}
	e.central = startE2ECentral(b, srv.Addr())
	spec := threeVoters
	spec.Race = false
	e.site = newSiteGroupAt(b, e.central.link, spec)
	e.site.startAll()
	e.site.leader()
	warm := e.round(b, 1, 1)
	if !warm.holds() {
		b.Fatalf("the warm-up notification: %s", warm)
	}
	return e
}

// roundResult is what one round measured.
type roundResult struct {
	rate     float64         // the schedule's Sends per second
	achieved float64         // Sends started per second
	sent     int             // notifications sent
	failed   int             // Sends that failed
	firstErr error           // the first of them
	lost     int             // Send accepted, never received
	failedIn int             // Send failed, received all the same
	dups     int             // copies beyond the first, of every number sent so far
	strays   int             // messages received that were never sent, so far
	timedOut bool            // the wait for every accepted notification ran out
	took     []time.Duration // each received notification's latency, sorted
}

// pct returns the p-quantile of the latencies, in ms.
func (r roundResult) pct(p float64) float64 {
	if len(r.took) == 0 {
		return 0
	}
	return float64(r.took[int(p*float64(len(r.took)-1))]) / float64(time.Millisecond)
}

// holds reports that the round met the goal: every Send accepted and
// delivered once, nothing received twice or unsent, p99 within 1 s, and
// the schedule kept.
func (r roundResult) holds() bool {
	return r.failed == 0 && r.lost == 0 && r.dups == 0 && r.strays == 0 &&
		r.pct(0.99) <= 1000 && r.achieved >= 0.95*r.rate
}

func (r roundResult) String() string {
	s := fmt.Sprintf("%d sent at %.0f/s (%.0f/s scheduled), p50 %.1f ms, p99 %.1f ms, max %.1f ms, lost %d, dups %d",
		r.sent, r.achieved, r.rate, r.pct(0.50), r.pct(0.99), r.pct(1), r.lost, r.dups)
	if r.failed > 0 {
		s += fmt.Sprintf(", %d Sends failed (the first: %v), %d of them delivered", r.failed, r.firstErr, r.failedIn)
	}
	if r.strays > 0 {
		s += fmt.Sprintf(", %d messages never sent", r.strays)
	}
	if r.timedOut {
		s += ", gave up waiting after 2 minutes"
	}
	return s
}

// report reports the round's metrics and fails b when a notification was
// lost or duplicated, a message came that was never sent, or a Send failed.
func (r roundResult) report(b *testing.B) {
	b.Helper()
	b.Logf("%s", r)
	b.ReportMetric(r.pct(0.50), "p50-ms")
	b.ReportMetric(r.pct(0.99), "p99-ms")
	b.ReportMetric(r.pct(1), "max-ms")
	b.ReportMetric(r.achieved, "sends/s")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.dups), "dups")
	if r.failed > 0 || r.lost > 0 || r.dups > 0 || r.strays > 0 {
		b.Errorf("%d Sends failed, %d notifications lost, %d copies received twice, %d messages never sent",
			r.failed, r.lost, r.dups, r.strays)
	}
}

// round sends n notifications at rate per second, open loop, waits until
// each accepted one has reached the SMTP server (or 2 minutes after the
// last Send) and the server has fallen quiet, and returns what it
// measured. The CPU each process used is logged.
func (e *endToEnd) round(b *testing.B, rate float64, n int) roundResult {
	b.Helper()
	first := e.seq.Add(int64(n)) - int64(n)
	failed := make([]bool, n)
	var (
		wg       sync.WaitGroup
		nFailed  atomic.Int64
		firstErr atomic.Value
		last     atomic.Int64 // the latest start of a Send, in ns after begin
	)
	cpu := e.startCPU(b)
	every := time.Duration(float64(time.Second) / rate)
	begin := time.Now()
	due := func(i int) time.Time { return begin.Add(time.Duration(i) * every) }
	for i := range n {
		if d := time.Until(due(i)); d > 0 {
			time.Sleep(d) // the schedule: the next Send's instant
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			started := int64(time.Since(begin))
			for {
				l := last.Load()
				if started <= l || last.CompareAndSwap(l, started) {
					break
				}
			}
			if _, err := e.site.client.To("ops").Send(ctx, e2eSubject(first+int64(i)), benchBody); err != nil {
				failed[i] = true
				nFailed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	r := roundResult{rate: rate, sent: n, failed: int(nFailed.Load())}
	if span := time.Duration(last.Load()); n > 1 && span > 0 {
		r.achieved = float64(n-1) / span.Seconds() // n Sends span n-1 intervals
	} else {
		r.achieved = rate
	}
	if err, ok := firstErr.Load().(error); ok {
		r.firstErr = err
	}

	// Wait for every notification the site accepted, without failing the
	// benchmark when one never comes: the round then reports it lost.
	missing := func() int {
		k := 0
		for i := range n {
			if !failed[i] && len(e.received[first+int64(i)]) == 0 {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(2 * time.Minute)
	for e.scan(); missing() > 0; e.scan() {
		if time.Now().After(deadline) {
			r.timedOut = true
			b.Logf("%d of %d accepted notifications not at the SMTP server after 2 minutes", missing(), n-r.failed)
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the server's list
	}
	e.quiet()
	cpu.log(b)
	for i := range n {
		at := e.received[first+int64(i)]
		switch {
		case len(at) == 0 && !failed[i]:
			r.lost++
		case len(at) == 0:
		default:
			if failed[i] {
				r.failedIn++
			}
			r.took = append(r.took, at[0].Sub(due(i)))
		}
	}
	r.dups, r.strays = e.duplicates()
	slices.Sort(r.took)
	return r
}

// quiet scans until the SMTP server has received nothing for e2eQuiet, so
// that a second copy still under way is counted.
func (e *endToEnd) quiet() {
	e.scan()
	seen, since := e.scanned, time.Now()
	for time.Since(since) < e2eQuiet {
		time.Sleep(50 * time.Millisecond) // polling the server's list
		if e.scan(); e.scanned != seen {
			seen, since = e.scanned, time.Now()
		}
	}
}

// duplicates returns the copies received beyond the first of every number
// sent so far, and the messages received that were never sent.
func (e *endToEnd) duplicates() (dups, strays int) {
	for _, at := range e.received {
		dups += len(at) - 1
	}
	return dups, e.strays
}

// finish waits for the SMTP server to fall quiet after the last round and
// fails b on a duplicate or a stray message no round counted.
func (e *endToEnd) finish(b *testing.B) {
	e.quiet()
	dups, strays := e.duplicates()
	b.Logf("over the whole benchmark: %d notifications sent, %d copies received twice, %d messages never sent",
		e.seq.Load(), dups, strays)
	if dups > 0 || strays > 0 {
		b.Errorf("%d copies received twice, %d messages never sent, over the whole benchmark", dups, strays)
	}
}

// scan reads the messages received since the last scan.
func (e *endToEnd) scan() {
	msgs := e.smtp.Messages()
	for _, m := range msgs[e.scanned:] {
		subject, _ := m.Parse()
		if seq, ok := e2eSeq(subject); ok && seq >= 0 && seq < e.seq.Load() {
			e.received[seq] = append(e.received[seq], m.At)
		} else {
			e.strays++
		}
	}
	e.scanned = len(msgs)
}

// e2eCPU records the CPU time of every process of the path.
type e2eCPU struct {
	e      *endToEnd
	start  time.Time
	before map[string]time.Duration
}

func (e *endToEnd) startCPU(b *testing.B) *e2eCPU {
	return &e2eCPU{e: e, start: time.Now(), before: e.cpuTimes(b)}
}

// cpuTimes returns the CPU time of this process ("bench": the senders and
// the SMTP server), of each site node, of central and of its plugins.
func (e *endToEnd) cpuTimes(b *testing.B) map[string]time.Duration {
	out := cpuTimes(b, e.site)
	out["bench"] = out["client"]
	delete(out, "client")
	pid := strconv.Itoa(e.central.cmd.Process.Pid)
	out["central"] = procCPU(b, pid)
	for _, child := range childPIDs(pid) {
		out[procName(child)] = procCPU(b, child)
	}
	return out
}

// log logs each process's CPU since the start, as a share of one core.
func (m *e2eCPU) log(b *testing.B) {
	wall := time.Since(m.start)
	after := m.e.cpuTimes(b)
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", name, 100*float64(after[name]-m.before[name])/float64(wall)))
	}
	b.Logf("CPU over %s, as a share of one core: %s", wall.Round(time.Millisecond), strings.Join(parts, ", "))
}

// procName names a plugin process by its command line's last word (outbox
// plugin serve email: "email"), or by its pid.
func procName(pid string) string {
	raw, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if f := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"); err == nil && len(f) > 1 {
		return "plugin " + f[len(f)-1]
	}
	return "plugin " + pid
}

// childPIDs returns the process ids of pid's children, from
// /proc/PID/task/*/children (each thread lists the children it started).
func childPIDs(pid string) []string {
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
	var out []string
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		out = append(out, strings.Fields(string(raw))...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// e2eCentral is the real `outbox central` process of the end-to-end
// benchmark.
type e2eCentral struct {
	dir  string
	link string
	*centralProcess
}

// startE2ECentral writes central's configuration and starts the outbox
// binary (without the race detector) on it: the list ops of one e-mail
// target, the e-mail channel sending to smtpAddr with nothing but its
// required settings, the site link for plant-1, the store on PostgreSQL
// when OUTBOX_TEST_POSTGRES_DSN is set (a fresh schema), else SQLite. It
// returns once central answers /readyz; central is stopped at the end.
func startE2ECentral(b *testing.B, smtpAddr string) *e2eCentral {
	b.Helper()
	dir := b.TempDir()
	c := &e2eCentral{dir: dir, link: freeAddr(b)}
	httpAddr := freeAddr(b)
	for name, content := range map[string]string{"admin.password": pagePassword + "\n", "plant-1.token": tokenPlant1} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	env := childEnv()
	store := ""
	if os.Getenv(sqlstoretest.EnvPostgres) != "" {
		dsn := sqlstoretest.PostgresSchema(b, sqlstoretest.PostgresServer(b))
		env = append(env, "OUTBOX_STORE_DSN="+dsn)
		store = "store:\n  driver: postgres\n"
	}
	smtpHost, smtpPort, _ := strings.Cut(smtpAddr, ":")
	pool := ""
	if v := os.Getenv("OUTBOX_BENCH_E2E_POOL"); v != "" {
		pool = fmt.Sprintf(", pool_size: %q", v)
	}
	config := fmt.Sprintf(`data_dir: %[1]q
%[2]soutbox:
  node_id: e2e-bench
log:
  level: warn
  format: json
lists:
  - {name: ops, type: email, targets: [ops@example.com]}
channels:
  - type: email
    settings: {host: %[3]q, port: %[4]q, tls: none, from: outbox@example.com%[5]s}
delivery:
  network: {allow: [127.0.0.1]}   # the SMTP server of the benchmark
http:
  listen: %[6]q
  admin: {name: %[7]s, password: %[8]q}
link:
  listen: %[9]q
  sites:
    - {id: %[10]s, token: %[11]q}
`, filepath.Join(dir, "data"), store, smtpHost, smtpPort, pool, httpAddr,
		pageAdmin, "file:"+filepath.Join(dir, "admin.password"), c.link, sitePlant1, "file:"+filepath.Join(dir, "plant-1.token"))
	file := filepath.Join(dir, "central.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		b.Fatal(err)
	}
	c.centralProcess = startCentralProcess(b, outboxBinary(b, false), dir, file, env, "http://"+httpAddr+"/readyz")
	return c
}
