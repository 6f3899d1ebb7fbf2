package acceptance

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
)

// BenchmarkTelemetry measures central's intake of the sites' telemetry
// through the driving port: reports of 200 new tracking rows from 10
// sites at once into the mirror (core.Service.ReportOperations over the
// real store). One op is one report.
func BenchmarkTelemetry(b *testing.B) {
	const batch, sites = 200, 10
	benchBackends(b, func(b *testing.B, be backend) {
		store := open(b, be.config(b))
		svc, err := core.New(core.Config{}, core.Deps{Store: store.Notifications(), Audit: store.Notifications(),
			Directory: store.Directory(), Channels: ports.ChannelMap{}, SiteCalls: store.SiteCalls(), Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		base := time.Now().UTC().Truncate(time.Microsecond)
		reports := make([][]ports.Operation, b.N)
		for i := range reports {
			reports[i] = make([]ports.Operation, batch)
			for j := range reports[i] {
				reports[i][j] = sitecallstest.NewOperation(base.Add(time.Duration(i*batch+j) * time.Microsecond))
			}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for w := range sites {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(reports) {
						return
					}
					if err := svc.ReportOperations(ctx, ports.OpReport{Site: "site-" + strconv.Itoa(w), Ops: reports[i]}); err != nil {
						b.Errorf("report: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "rows/s")
	})
}
