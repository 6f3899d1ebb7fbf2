package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/ports"
)

func noKPIs(context.Context) (ports.KPIReport, error) { return ports.KPIReport{}, nil }

// TestCentralCollectorExportsTheSites: per site that reported, its last
// contact's age, its state, and the backlog and parked counts per kind
// of its leader, or of its most recent report when none leads; a failed read
// exports outbox_sites_up 0 and no site.
func TestCentralCollectorExportsTheSites(t *testing.T) {
	now := time.Now()
	ops := func(calls, parked int64) []ports.OpKindStats {
		return []ports.OpKindStats{{Kind: ports.OpCall, Backlog: calls, Parked: parked}, {Kind: ports.OpWrite, Backlog: 1, Parked: 2}}
	}
	node := func(id string, at time.Time, backlog int64, o []ports.OpKindStats) ports.SiteNodeHealth {
		return ports.SiteNodeHealth{SiteHealth: ports.SiteHealth{Node: id, Backlog: backlog, Operations: o}, ReportedAt: at}
	}
	views := []ports.SiteView{
		{Site: "plant-1", State: ports.SiteConnected, LastContact: now.Add(-3 * time.Second), Leader: "a",
			Nodes: []ports.SiteNodeHealth{node("a", now.Add(-10*time.Second), 7, ops(4, 3)), node("b", now.Add(-3*time.Second), 6, ops(9, 9))}},
		{Site: "plant-2", State: ports.SiteStale, LastContact: now.Add(-time.Minute),
			Nodes: []ports.SiteNodeHealth{node("a", now.Add(-2*time.Minute), 9, nil), node("b", now.Add(-time.Minute), 5, nil)}},
		{Site: "plant-3", State: ports.SiteDisconnected}, // no node's health
	}
	var fail bool
	src := CentralSources{KPIs: noKPIs, CacheFor: -1, Sites: func(ctx context.Context) ([]ports.SiteView, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the read of the sites has no deadline")
		}
		if fail {
			return nil, errors.New("store down")
		}
		return views, nil
	}}
	c, err := NewCentralCollector(src, discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("pedantic gather: %v", err)
	}
	body := scrapeCentral(t, src, NewDeliveryMetrics())
	for _, want := range []string{
		"outbox_sites_up 1",
		`outbox_site_state{site="plant-1",state="connected"} 1`, `outbox_site_state{site="plant-1",state="stale"} 0`,
		`outbox_site_state{site="plant-2",state="stale"} 1`, `outbox_site_state{site="plant-3",state="disconnected"} 1`,
		// plant-1: its leader a's counts, though b reported later.
		`outbox_site_reported_backlog{kind="notification",site="plant-1"} 7`, `outbox_site_reported_backlog{kind="call",site="plant-1"} 4`,
		`outbox_site_reported_backlog{kind="write",site="plant-1"} 1`, `outbox_site_reported_parked{kind="call",site="plant-1"} 3`,
		`outbox_site_reported_parked{kind="write",site="plant-1"} 2`,
		// plant-2: no leader; b reported last, so its counts, not a's larger backlog.
		`outbox_site_reported_backlog{kind="notification",site="plant-2"} 5`, `outbox_site_reported_backlog{kind="call",site="plant-2"} 0`,
		`outbox_site_reported_parked{kind="call",site="plant-2"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, absent := range []string{`outbox_site_last_contact_seconds{site="plant-3"}`, `outbox_site_reported_backlog{kind="notification",site="plant-3"}`,
		`outbox_site_reported_parked{kind="notification"`,
		// the names before "reported", outbox_site_backlog a node's own
		"outbox_site_backlog{", "outbox_site_parked{"} {
		if strings.Contains(body, absent) {
			t.Errorf("/metrics has %s", absent)
		}
	}
	for site, least := range map[string]float64{"plant-1": 3, "plant-2": 60} {
		var age float64
		line := metricLine(body, `outbox_site_last_contact_seconds{site="`+site+`"}`)
		if _, err := fmtSscan(line, &age); err != nil || age < least || age > least+30 {
			t.Errorf("%s: last contact %q; want about %gs", site, line, least)
		}
	}

	fail = true
	body = scrapeCentral(t, src, NewDeliveryMetrics())
	if !strings.Contains(body, "outbox_sites_up 0\n") || strings.Contains(body, "outbox_site_state{") {
		t.Errorf("a failed read of the sites:\n%s", body)
	}
}

// TestCentralCollectorWithoutSites: central without a mirror exports no
// site metric, not even outbox_sites_up.
func TestCentralCollectorWithoutSites(t *testing.T) {
	body := scrapeCentral(t, CentralSources{KPIs: noKPIs}, NewDeliveryMetrics())
	if strings.Contains(body, "outbox_site") {
		t.Errorf("/metrics without Sites has site metrics:\n%s", body)
	}
}

// TestSiteLinkCollector: the node's link counters, each under its name
// with the node's site and id.
func TestSiteLinkCollector(t *testing.T) {
	counts := LinkCounts{TelemetryQueued: 10, TelemetryPending: 1, TelemetryDropped: 2, TelemetrySent: 6, TelemetryFailed: 1,
		Syncs: 40, SyncFailures: 3, CommandsApplied: 5, CommandsRefused: 1, FeedPages: 2}
	c := NewSiteLinkCollector("plant-1", "a", func() LinkCounts { return counts })
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("pedantic gather: %v", err)
	}
	h, err := Handler(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	l := `{node="a",site="plant-1"} `
	for _, want := range []string{
		"outbox_site_link_telemetry_queued_total" + l + "10", "outbox_site_link_telemetry_pending" + l + "1",
		"outbox_site_link_telemetry_dropped_total" + l + "2", "outbox_site_link_telemetry_sent_total" + l + "6",
		"outbox_site_link_telemetry_failed_total" + l + "1", "outbox_site_link_syncs_total" + l + "40",
		"outbox_site_link_sync_failures_total" + l + "3",
		`outbox_site_link_commands_total{node="a",outcome="applied",site="plant-1"} 5`,
		`outbox_site_link_commands_total{node="a",outcome="refused",site="plant-1"} 1`,
		"outbox_site_link_feed_pages_total" + l + "2",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// metricLine returns the line of body that starts with series.
func metricLine(body, series string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// fmtSscan reads the value of a metric line.
func fmtSscan(line string, v *float64) (int, error) {
	_, value, ok := strings.Cut(line, "} ")
	if !ok {
		return 0, errors.New("no value")
	}
	return fmt.Sscan(value, v)
}
