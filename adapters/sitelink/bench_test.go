package sitelink

import (
	"testing"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
)

// BenchmarkLinkSubmit measures ingest through the link: one site submits
// batches of 500 notifications, one after another as a forwarder does, over
// TLS with a client certificate, to core.Service on the memory store. It
// reports notifications/s. The site's ingest quota is lifted: this
// measures what the link costs, not the quota.
func BenchmarkLinkSubmit(b *testing.B) {
	const batchSize = 500
	ca := newCA(b, "outbox bench CA")
	svc, _ := newCore(b)
	_, addr := startServer(b, ServerConfig{Central: svc, Sites: testSites, TLS: ca.serverTLS(b),
		Limits: Limits{Quota: Quota{RowsPerSecond: 1e9, BytesPerSecond: 1e12}}})
	c := dial(b, ClientConfig{Addr: addr, TLS: ca.clientTLS(ca.clientCert(b, "site-c"))})

	template := centraltest.NewSubmission("site-c")
	batch := make([]ports.Submission, batchSize)
	submitted := 0
	for b.Loop() {
		for i := range batch {
			batch[i] = template
			batch[i].ID = uuid.Must(uuid.NewV7()).String()
		}
		res, err := c.Submit(b.Context(), ports.SubmitRequest{Notifications: batch})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Accepted) != batchSize {
			b.Fatalf("accepted %d of %d: %v", len(res.Accepted), batchSize, res.Rejected)
		}
		submitted += batchSize
	}
	b.ReportMetric(float64(submitted)/b.Elapsed().Seconds(), "notifications/s")
}

// BenchmarkLinkReportOperations measures telemetry through the link: one
// site reports batches of ports.MaxSiteCallReport rows, one after another
// as the site's sender does, over TLS with a client certificate, to a
// ports.Central that only records them (the mirror's store is measured in
// package core). It reports rows/s: what the link costs, the quota lifted.
func BenchmarkLinkReportOperations(b *testing.B) {
	ca := newCA(b, "outbox bench CA")
	m := &mirror{}
	_, addr := startServer(b, ServerConfig{Central: m, Sites: testSites, TLS: ca.serverTLS(b),
		Limits: Limits{Quota: Quota{RowsPerSecond: 1e9, BytesPerSecond: 1e12}}})
	c := dial(b, ClientConfig{Addr: addr, TLS: ca.clientTLS(ca.clientCert(b, "site-c"))})
	ops := make([]ports.Operation, ports.MaxSiteCallReport)
	for i := range ops {
		ops[i] = newOperation()
	}
	reported := 0
	for b.Loop() {
		if err := c.ReportOperations(b.Context(), ports.OpReport{Ops: ops}); err != nil {
			b.Fatal(err)
		}
		reported += len(ops)
		m.mu.Lock()
		m.reports = m.reports[:0]
		m.mu.Unlock()
	}
	b.ReportMetric(float64(reported)/b.Elapsed().Seconds(), "rows/s")
}
