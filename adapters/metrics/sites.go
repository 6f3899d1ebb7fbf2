package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/ports"
)

// siteKinds are the categories of a site's backlog, as the kind label
// names them: a site's notifications and its cached operations by kind.
var siteKinds = []struct {
	label string
	op    ports.OpKind // "" for the notifications
}{{"notification", ""}, {"call", ports.OpCall}, {"write", ports.OpWrite}}

// siteStates are the values of outbox_site_state's state label.
var siteStates = []ports.SiteState{ports.SiteConnected, ports.SiteStale, ports.SiteDisconnected}

// sitesMetrics exports central's view of the sites (CentralSources.Sites,
// core.Service.SiteStates): one series set per site that reported, each
// computed at the scrape from a read shared as the KPIs' is.
type sitesMetrics struct {
	read *readCache[[]ports.SiteView]
	now  func() time.Time

	up, lastContact, state, backlog, parked *prometheus.Desc
}

func newSitesMetrics(read func(context.Context) ([]ports.SiteView, error), ttl time.Duration) *sitesMetrics {
	return &sitesMetrics{
		read: &readCache[[]ports.SiteView]{read: read, ttl: ttl, now: time.Now},
		now:  time.Now,
		up:   prometheus.NewDesc("outbox_sites_up", "1 when central could read the sites' state.", nil, nil),
		lastContact: prometheus.NewDesc("outbox_site_last_contact_seconds",
			"Seconds since any node of the site last reported to central.", []string{"site"}, nil),
		state: prometheus.NewDesc("outbox_site_state",
			"1 for the site's current state at central (connected, stale, disconnected).", []string{"site", "state"}, nil),
		backlog: prometheus.NewDesc("outbox_site_reported_backlog",
			"What the site buffers, per kind (notification, call, write), as its leader (or, when none leads, its most recently reporting node) "+
				"last reported to central; calls and writes count those waiting for a retry.", []string{"site", "kind"}, nil),
		parked: prometheus.NewDesc("outbox_site_reported_parked",
			"Cached calls and writes parked at the site, per kind (call, write), as its leader (or, when none leads, its most recently reporting node) "+
				"last reported to central.",
			[]string{"site", "kind"}, nil),
	}
}

func (m *sitesMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.up, m.lastContact, m.state, m.backlog, m.parked} {
		ch <- d
	}
}

// collect exports every site's metrics, or outbox_sites_up 0 when the read
// failed.
func (m *sitesMetrics) collect(ch chan<- prometheus.Metric) error {
	views, err := m.read.get()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 0)
		return err
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 1)
	now := m.now()
	for _, v := range views {
		if !v.LastContact.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.lastContact, prometheus.GaugeValue, max(0, now.Sub(v.LastContact).Seconds()), v.Site)
		}
		for _, st := range siteStates {
			x := 0.0
			if v.State == st {
				x = 1
			}
			ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, x, v.Site, string(st))
		}
		h, ok := reportingNode(v)
		if !ok {
			continue
		}
		for _, k := range siteKinds {
			if k.op == "" {
				ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(h.Backlog), v.Site, k.label)
				continue
			}
			var s ports.OpKindStats
			for _, o := range h.Operations {
				if o.Kind == k.op {
					s = o
				}
			}
			ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(s.Backlog), v.Site, k.label)
			ch <- prometheus.MustNewConstMetric(m.parked, prometheus.GaugeValue, float64(s.Parked), v.Site, k.label)
		}
	}
	return nil
}

// reportingNode is the health whose counts stand for the site: its
// leader's (v.Leader, the node that most recently reported leading), or,
// when no node reported leading, the most recent report's (the largest
// ReportedAt; of equal times, the first node by name). Every node of a
// group holds the same replicated counts and the leader's are the newest;
// without a leader the freshest report is the nearest to the site's state
// now. (The Sites page shows the largest backlog instead in that case.)
func reportingNode(v ports.SiteView) (ports.SiteNodeHealth, bool) {
	var best ports.SiteNodeHealth
	found := false
	for _, n := range v.Nodes {
		if n.Node == v.Leader && v.Leader != "" {
			return n, true
		}
		if !found || n.ReportedAt.After(best.ReportedAt) {
			best, found = n, true
		}
	}
	return best, found
}
