// Package metrics exports the product's health as Prometheus metrics, so that
// users alert with their own tools. A collector reads its driving port at
// each scrape, so a metric is never staler than the scrape itself.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/siteline/outbox/ports"
)

// scrapeTimeout bounds one read of the port during a scrape.
const scrapeTimeout = 5 * time.Second

// SiteCollector is a prometheus.Collector of one site node's health:
// backlog, oldest buffered age, Raft role and term, last contact with
// central, and per kind of cached operation (ExternalCall, DatabaseWrite)
// the backlog, the parked ones and the oldest buffered one's age.
type SiteCollector struct {
	site ports.Site
	log  *slog.Logger

	backlog, oldestAge, term, role, lastContact, centralErr, up *prometheus.Desc
	opBacklog, opParked, opOldestAge                            *prometheus.Desc
}

var _ prometheus.Collector = (*SiteCollector)(nil)

// NewSiteCollector returns a collector reading site's Health at each scrape.
func NewSiteCollector(site ports.Site, logger *slog.Logger) *SiteCollector {
	labels := []string{"site", "node"}
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc("outbox_site_"+name, help, append(labels, extra...), nil)
	}
	return &SiteCollector{
		site:        site,
		log:         logger,
		backlog:     d("backlog", "Notifications buffered at the site, not yet acknowledged by central."),
		oldestAge:   d("oldest_buffered_age_seconds", "Age of the oldest buffered notification; 0 when the backlog is empty."),
		term:        d("raft_term", "Raft term the node is in."),
		role:        d("raft_role", "1 for the node's current Raft role (leader, follower, candidate, shutdown).", "role"),
		lastContact: d("last_central_contact_timestamp_seconds", "Unix time of the node's last completed call to central; 0 if none."),
		centralErr:  d("central_error", "1 when the node's last call to central failed."),
		up:          prometheus.NewDesc("outbox_site_health_up", "1 when the node's health could be read.", nil, nil),
		opBacklog:   d("operations_backlog", "Cached calls or writes buffered at the site, waiting for a retry.", "kind"),
		opParked:    d("operations_parked", "Cached calls or writes parked at the site after their retries ran out.", "kind"),
		opOldestAge: d("operations_oldest_buffered_age_seconds", "Age of the oldest buffered (waiting or parked) cached call or write; 0 when none.", "kind"),
	}
}

// Describe implements prometheus.Collector.
func (c *SiteCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.oldestAge, c.term, c.role, c.lastContact, c.centralErr, c.up,
		c.opBacklog, c.opParked, c.opOldestAge} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *SiteCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	h, err := c.site.Health(ctx)
	if err != nil {
		c.log.Warn("metrics: read site health", "err", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{h.Site, h.Node}, extra...)...)
	}
	gauge(c.backlog, float64(h.Backlog))
	age := 0.0
	if !h.OldestEnqueuedAt.IsZero() {
		age = max(0, time.Since(h.OldestEnqueuedAt).Seconds())
	}
	gauge(c.oldestAge, age)
	gauge(c.term, float64(h.Replica.Term))
	for _, r := range []ports.Role{ports.RoleLeader, ports.RoleFollower, ports.RoleCandidate, ports.RoleShutdown} {
		v := 0.0
		if h.Replica.Role == r {
			v = 1
		}
		gauge(c.role, v, string(r))
	}
	contact := 0.0
	if !h.LastCentralContact.IsZero() {
		contact = float64(h.LastCentralContact.UnixNano()) / 1e9
	}
	gauge(c.lastContact, contact)
	errv := 0.0
	if h.LastCentralError != "" {
		errv = 1
	}
	gauge(c.centralErr, errv)
	for _, k := range h.Operations {
		gauge(c.opBacklog, float64(k.Backlog), string(k.Kind))
		gauge(c.opParked, float64(k.Parked), string(k.Kind))
		age := 0.0
		if !k.OldestBufferedAt.IsZero() {
			age = max(0, time.Since(k.OldestBufferedAt).Seconds())
		}
		gauge(c.opOldestAge, age, string(k.Kind))
	}
}

// Handler returns an http.Handler serving /metrics for cs plus the Go
// runtime and process collectors.
func Handler(cs ...prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux, nil
}
