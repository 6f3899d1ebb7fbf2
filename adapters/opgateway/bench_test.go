package opgateway_test

import (
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// BenchmarkCall is the gateway's share of an immediate success: one POST
// to a server on loopback, from as many callers as GOMAXPROCS×4.
func BenchmarkCall(b *testing.B) {
	tg := newTarget(b, nil)
	g := newGateway(b, opgateway.Config{Systems: []opgateway.System{erp(tg.URL)}}, secretref.Policy{})
	b.SetParallelism(4)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := g.Attempt(b.Context(), callOp("addLine", `{"id":5,"qty":2}`)); res.Outcome != ports.OutcomeSuccess {
				b.Error(res.Error)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkWriteExactlyOnce is one exactly-once INSERT on PostgreSQL, from
// as many callers as GOMAXPROCS×4.
func BenchmarkWriteExactlyOnce(b *testing.B) {
	db := postgresDatabase(b)
	db.exec(b, `CREATE TABLE counts (tag text NOT NULL)`)
	g := db.connect(b, true)
	b.SetParallelism(4)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := g.Attempt(b.Context(), writeOp("INSERT INTO counts (tag) VALUES ($1)", `["x"]`)); res.Outcome != ports.OutcomeSuccess {
				b.Error(res.Error)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}
