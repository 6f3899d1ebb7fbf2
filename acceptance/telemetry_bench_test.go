package acceptance

import (
	"context"
	"testing"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
)

// BenchmarkTelemetry measures central's intake of the sites' telemetry
// through the driving port: reports of 200 new tracking rows from 10
// sites at once into the mirror (core.Service.ReportOperations over the
// real store). One op is one report.
func BenchmarkTelemetry(b *testing.B) {
	benchBackends(b, func(b *testing.B, be backend) {
		store := open(b, be.config(b))
		svc, err := core.New(core.Config{}, core.Deps{Store: store.Notifications(), Audit: store.Notifications(),
			Directory: store.Directory(), Channels: ports.ChannelMap{}, SiteCalls: store.SiteCalls(), Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		sitecallstest.BenchReports(b, 200, 10, func(site string, ops []ports.Operation) (int, error) {
			err := svc.ReportOperations(context.Background(), ports.OpReport{Site: site, Ops: ops})
			if err != nil {
				return 0, err
			}
			return len(ops), nil
		})
	})
}
