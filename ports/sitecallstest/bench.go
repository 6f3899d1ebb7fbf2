package sitecallstest

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// BenchReports measures the intake of reports: b.N reports of batch new
// rows each, sent by sites goroutines at once (as "site-0", "site-1", …)
// through report, which returns how many rows it stored. It reports rows/s.
func BenchReports(b *testing.B, batch, sites int, report func(site string, ops []ports.Operation) (int, error)) {
	base := time.Now().UTC().Truncate(time.Microsecond)
	reports := make([][]ports.Operation, b.N)
	for i := range reports {
		reports[i] = make([]ports.Operation, batch)
		for j := range reports[i] {
			reports[i][j] = NewOperation(base.Add(time.Duration(i*batch+j) * time.Microsecond))
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
				n, err := report("site-"+strconv.Itoa(w), reports[i])
				if err != nil || n != batch {
					b.Errorf("report: %d of %d rows, %v", n, batch, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "rows/s")
}
