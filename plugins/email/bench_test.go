package email

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// BenchmarkEmail measures deliveries per second from parallel senders, in
// process, to a real SMTP server on loopback. Each message has two targets,
// except in the cases named targets=N, which have N (one RCPT TO each). The
// file builds on earlier versions of the package too, so that old and new
// builds can be compared case by case.
//
//	go test -run '^$' -bench BenchmarkEmail ./plugins/email/
func BenchmarkEmail(b *testing.B) {
	for _, c := range []struct {
		tls      string
		poolSize int
		targets  int // 0: the two of the first cases
	}{
		{tlsNone, 4, 0}, // the default pool_size before 16
		{tlsNone, 8, 0},
		{tlsNone, 16, 0},
		{tlsStartTLS, 8, 0},
		{tlsNone, 8, 1},
		{tlsNone, 8, 10},
	} {
		name := "tls=" + c.tls + "/pool=" + strconv.Itoa(c.poolSize)
		targets := []string{"alice@example.com", "bob@example.net"}
		if c.targets > 0 {
			name += "/targets=" + strconv.Itoa(c.targets)
			targets = make([]string, c.targets)
			for i := range targets {
				targets[i] = "user" + strconv.Itoa(i) + "@example.com"
			}
		}
		b.Run(name, func(b *testing.B) {
			srv := newTestServer(b, serverConfig{tls: c.tls, discard: true})
			ch := newChannel(b, nil)
			settings := srv.settings(b, "pool_size", strconv.Itoa(c.poolSize))
			req := testRequest(settings, targets...)
			// Warm the pool so that the figure is about sending, not dialing.
			for range c.poolSize {
				if res := deliver(b, ch, req); res.Outcome != channel.Success {
					b.Fatalf("warm-up: %v %s", res.Outcome, res.Error)
				}
			}
			start := srv.count.Load()
			var failed atomic.Int64
			// Twice as many senders as connections, as the dispatcher runs more
			// deliveries than the pool has connections.
			b.SetParallelism(max(1, 2*c.poolSize/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					res := ch.Deliver(ctx, req)
					cancel()
					if res.Outcome != channel.Success {
						failed.Add(1)
					}
				}
			})
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d deliveries failed", n)
			}
			if got := srv.count.Load() - start; got != int64(b.N) {
				b.Fatalf("server got %d messages, want %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "emails/s")
		})
	}
}
