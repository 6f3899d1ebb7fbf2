package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// LinkCounts are a site node's counters of its link to central since it
// started: the same fields as core.LinkStats, which the wiring converts
// (a conversion that stops compiling when the two part).
type LinkCounts struct {
	TelemetryQueued  int64
	TelemetryPending int64
	TelemetryDropped int64
	TelemetrySent    int64
	TelemetryFailed  int64
	Syncs            int64
	SyncFailures     int64
	CommandsApplied  int64
	CommandsRefused  int64
	FeedPages        int64
}

// SiteLinkCollector is a prometheus.Collector of a site node's link
// counters: telemetry queued, sent, dropped, failed and pending, Syncs and
// their failures, operators' commands applied and refused, and pages of
// the change feed sent.
type SiteLinkCollector struct {
	read       func() LinkCounts
	site, node string

	queued, pending, dropped, sent, failed *prometheus.Desc
	syncs, syncFailures, commands, feed    *prometheus.Desc
}

var _ prometheus.Collector = (*SiteLinkCollector)(nil)

// NewSiteLinkCollector returns a collector of read's counters, labelled
// with the node's site and id. read must not block.
func NewSiteLinkCollector(site, node string, read func() LinkCounts) *SiteLinkCollector {
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc("outbox_site_link_"+name, help, append([]string{"site", "node"}, extra...), nil)
	}
	return &SiteLinkCollector{
		read: read, site: site, node: node,
		queued:  d("telemetry_queued_total", "Changes of cached operations queued for telemetry to central."),
		pending: d("telemetry_pending", "Changes queued for telemetry, not yet sent."),
		dropped: d("telemetry_dropped_total",
			"Changes dropped from the full telemetry queue (central.telemetry_queue), oldest first; reconciliation heals them."),
		sent:         d("telemetry_sent_total", "Changes of cached operations central took."),
		failed:       d("telemetry_failed_total", "Changes whose telemetry batch was given up or refused; reconciliation heals them."),
		syncs:        d("syncs_total", "Syncs (health reports, and the leader's long polls) central answered."),
		syncFailures: d("sync_failures_total", "Syncs that failed."),
		commands:     d("commands_total", "Operators' commands relayed by central that this node answered, by outcome (applied, refused).", "outcome"),
		feed:         d("feed_pages_total", "Pages of the change feed sent to central for its reconciliation."),
	}
}

// Describe implements prometheus.Collector.
func (c *SiteLinkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queued, c.pending, c.dropped, c.sent, c.failed, c.syncs, c.syncFailures, c.commands, c.feed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *SiteLinkCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	counter := func(d *prometheus.Desc, v int64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{c.site, c.node}, extra...)...)
	}
	counter(c.queued, s.TelemetryQueued)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(s.TelemetryPending), c.site, c.node)
	counter(c.dropped, s.TelemetryDropped)
	counter(c.sent, s.TelemetrySent)
	counter(c.failed, s.TelemetryFailed)
	counter(c.syncs, s.Syncs)
	counter(c.syncFailures, s.SyncFailures)
	counter(c.commands, s.CommandsApplied, "applied")
	counter(c.commands, s.CommandsRefused, "refused")
	counter(c.feed, s.FeedPages)
}
