package acceptance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/metrics"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// These tests hold central's view of a site — the mirror of its cached
// operations and its state — to the site's own through failures, with
// real `outbox site` processes: telemetry lost while central is down, and
// every node of a site killed. The site's thresholds and report interval
// are short, through their settings; every wait is on a condition.

// Thresholds of these tests: a site stale after 2 s without a report,
// disconnected after 5 s; its nodes report every 300 ms (a leader with
// nothing to do once a second).
const (
	testStaleAfter        = 2 * time.Second
	testDisconnectedAfter = 5 * time.Second
	testReportInterval    = "300ms"
)

// twoSystems is the site configuration of two systems at e's address:
// erp parks a call after one retry 200 ms later, slow retries an hour
// later, so its calls stay in the backlog.
func twoSystems(e *erpSystem) string {
	return fmt.Sprintf(`external_systems:
  - name: erp
    base_url: %[1]q
    timeout: 5s
    max_retries: 1
    retry_interval: 200ms
    methods:
      - {name: order, verb: POST, path: /orders}
  - name: slow
    base_url: %[1]q
    timeout: 5s
    max_retries: 100
    retry_interval: 1h
    methods:
      - {name: order, verb: POST, path: /orders}
`, e.URL)
}

// callsTo makes n cached calls to system (which is down: each answers
// Pending) and returns their ids.
func callsTo(t *testing.T, c *notify.Client, system string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := c.Call(ctx, system, "order", map[string]any{"item": fmt.Sprintf("valve-%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("call %d to %s: %v", i, system, err)
		}
		if r.Operation.Status != ports.OpPending {
			t.Fatalf("call %d to %s with the system down answered %s, want Pending", i, system, r.Operation.Status)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// siteRows returns every tracking row node n holds, through its own API.
func siteRows(c *notify.Client) (map[string]ports.Operation, error) {
	out := map[string]ports.Operation{}
	page := ports.PageRequest{Limit: 500}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := c.Operations(ctx, ports.OpFilter{}, page)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("the site's tracking rows: %w", err)
		}
		for _, op := range p.Items {
			out[op.ID] = op
		}
		if p.Next == "" {
			return out, nil
		}
		page.After = p.Next
	}
}

// mirrorRows returns every row of site in central's mirror.
func (c *centralLink) mirrorRows(site string) (map[string]ports.SiteCall, error) {
	out := map[string]ports.SiteCall{}
	page := ports.PageRequest{Limit: 500}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := c.store.SiteCalls().QuerySiteCalls(ctx, ports.SiteCallFilter{Site: site}, page)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("central's mirror: %w", err)
		}
		for _, sc := range p.Items {
			out[sc.ID] = sc
		}
		if p.Next == "" {
			return out, nil
		}
		page.After = p.Next
	}
}

// rowDiff names the first field where central's mirror row differs from
// the site's tracking row ("" when none): every field the mirror keeps,
// times to the microsecond the stores keep.
func rowDiff(site ports.Operation, m ports.Operation) string {
	type field struct {
		name      string
		got, want any
	}
	us := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMicro()
	}
	for _, f := range []field{
		{"version", m.Version, site.Version}, {"status", m.Status, site.Status}, {"retry count", m.RetryCount, site.RetryCount},
		{"last error", m.LastError, site.LastError}, {"kind", m.Kind, site.Kind}, {"target", m.Target, site.Target},
		{"method", m.Method, site.Method}, {"source instance", m.SourceInstance, site.SourceInstance},
		{"source script", m.SourceScript, site.SourceScript}, {"created", us(m.CreatedAt), us(site.CreatedAt)},
		{"updated", us(m.UpdatedAt), us(site.UpdatedAt)}, {"terminal", us(m.TerminalAt), us(site.TerminalAt)},
		{"next attempt", us(m.NextAttemptAt), us(site.NextAttemptAt)},
	} {
		if f.got != f.want {
			return fmt.Sprintf("%s %v at central, %v at the site", f.name, f.got, f.want)
		}
	}
	return ""
}

// mirrorTally compares central's mirror of site with the site's rows:
// rows mirrored exactly, rows missing or different (lost), and rows
// central holds that the site does not (duplicates, which must not be).
type mirrorTally struct {
	siteRows, exact, lost, extra int
	example                      string
}

func (m mirrorTally) String() string {
	return fmt.Sprintf("site rows %d, mirrored exactly %d, lost or behind %d, at central only %d", m.siteRows, m.exact, m.lost, m.extra)
}

func compareMirror(rows map[string]ports.Operation, mirror map[string]ports.SiteCall) mirrorTally {
	m := mirrorTally{siteRows: len(rows)}
	for id, op := range rows {
		sc, ok := mirror[id]
		d := "absent at central"
		if ok {
			d = rowDiff(op, sc.Operation)
		}
		if d == "" {
			m.exact++
			continue
		}
		m.lost++
		if m.example == "" {
			m.example = id + ": " + d
		}
	}
	for id := range mirror {
		if _, ok := rows[id]; !ok {
			m.extra++
			if m.example == "" {
				m.example = id + ": at central, not at the site"
			}
		}
	}
	return m
}

// waitMirrorConverged waits until central's mirror of the group's site
// holds exactly the leader's tracking rows, and returns the tally.
func waitMirrorConverged(t *testing.T, c *centralLink, g *siteGroup, leader *notify.Client, what string) mirrorTally {
	t.Helper()
	var last mirrorTally
	waittest.For(t, opWait, what, func() (bool, string) {
		rows, err := siteRows(leader)
		if err != nil {
			return false, err.Error()
		}
		mirror, err := c.mirrorRows(g.site)
		if err != nil {
			return false, err.Error()
		}
		last = compareMirror(rows, mirror)
		return last.lost == 0 && last.extra == 0, last.String() + "; e.g. " + last.example
	})
	return last
}

// scrape returns the text of the /metrics endpoint at addr.
func scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics at %s: %d %s, %v", addr, resp.StatusCode, b, err)
	}
	return string(b), nil
}

// metricSum returns the sum of the series of name in body whose labels
// hold every one of labels (`site="plant-1"`), and whether there is one.
func metricSum(body, name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, l := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(l, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for _, lb := range labels {
			match = match && strings.Contains(series, lb)
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil && match {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// waitNodeMetric waits until node n's /metrics satisfies ok for the sum of
// name, and returns it.
func waitNodeMetric(t *testing.T, n *siteNode, name, what string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	waittest.For(t, opWait, fmt.Sprintf("node %s: %s (%s)", n.id, what, name), func() (bool, string) {
		body, err := scrape(n.metrics)
		if err != nil {
			return false, err.Error()
		}
		var found bool
		v, found = metricSum(body, name)
		return found && ok(v), fmt.Sprintf("%s = %g (found %t)", name, v, found)
	})
	return v
}

// serveCentralMetrics serves central's /metrics, as `outbox central` builds
// it, on a loopback address, reading the sites at every scrape.
func (c *centralLink) serveCentralMetrics(t *testing.T) string {
	t.Helper()
	h, err := metrics.CentralHandler(metrics.CentralSources{KPIs: c.svc.KPIs, Sites: c.svc.SiteStates, CacheFor: -1},
		metrics.NewDeliveryMetrics(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestSiteCallsMirrorHealsAfterLostTelemetry: central's link is down while
// the site's cached calls change — calls made and parked, parked calls
// discarded at the site — long enough for the site to give its telemetry
// up (counted on its /metrics); central's mirror is then behind. Central
// comes back: it asks the returning site's leader for its change feed,
// and the mirror converges to every row of the site's tracking table,
// field by field (status, version, retry count, error, times), with no row
// of its own.
func TestSiteCallsMirrorHealsAfterLostTelemetry(t *testing.T) {
	erp := newERPSystem(t) // down: every call answers 503
	// Reconciliation on its schedule would heal too, but not within the
	// test: what heals here is the ask when the site comes back.
	c := newCentralWith(t, core.Config{SiteStaleAfter: testStaleAfter, SiteDisconnectedAfter: testDisconnectedAfter,
		ReconcileInterval: time.Hour})
	c.up()
	g := newSiteGroup(t, c, siteSpec{Extra: erpConfig(erp, 1, "200ms"), ReportInterval: testReportInterval, Metrics: true})
	g.startAll()
	leader := g.leader()
	lc, err := notify.Dial(leader.api)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()

	const before, during = 12, 12
	early := callsTo(t, g.client, "erp", before)
	waitTracked(t, g, nodeClients(t, g), early, "parked", func(op ports.Operation) bool { return op.Status == ports.OpParked })
	waitMirrorConverged(t, c, g, lc, "the mirror follows the site by telemetry")

	// Central down: new calls park, some of them and of the earlier ones
	// are discarded at the site; the telemetry of all that is given up.
	c.down()
	late := callsTo(t, g.client, "erp", during)
	waitTracked(t, g, nodeClients(t, g), late, "parked", func(op ports.Operation) bool { return op.Status == ports.OpParked })
	discarded := append(append([]string{}, early[:4]...), late[:3]...)
	for _, id := range discarded {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		op, err := g.client.Discard(ctx, id)
		cancel()
		if err != nil || op.Status != ports.OpDiscarded {
			t.Fatalf("discard %s at the site: %+v, %v", id, op, err)
		}
	}
	// Every change queued is accounted for — sent before central went
	// down, or given up — and none is in a batch still being tried, which
	// would heal the mirror without the reconciliation.
	var failed float64
	waittest.For(t, opWait, "the leader's telemetry given up, none left to send", func() (bool, string) {
		body, err := scrape(leader.metrics)
		if err != nil {
			return false, err.Error()
		}
		v := map[string]float64{}
		for _, name := range []string{"queued_total", "sent_total", "failed_total", "dropped_total", "pending"} {
			v[name], _ = metricSum(body, "outbox_site_link_telemetry_"+name)
		}
		failed = v["failed_total"]
		return failed > 0 && v["pending"] == 0 && v["queued_total"] == v["sent_total"]+v["failed_total"]+v["dropped_total"],
			fmt.Sprintf("telemetry %v", v)
	})
	rows, err := siteRows(lc)
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := c.mirrorRows(g.site)
	if err != nil {
		t.Fatal(err)
	}
	behind := compareMirror(rows, mirror)
	if behind.lost < during+4 {
		t.Fatalf("with central down the mirror is behind by %d rows only (%s); the test lost no telemetry", behind.lost, behind)
	}
	pagesBefore := waitNodeMetric(t, leader, "outbox_site_link_feed_pages_total", "feed pages so far", func(float64) bool { return true })

	upAt := time.Now()
	c.up()
	healed := waitMirrorConverged(t, c, g, lc, "the mirror converged to the site's tracking table")
	healedIn := time.Since(upAt)
	pages := waitNodeMetric(t, leader, "outbox_site_link_feed_pages_total", "feed pages sent", func(v float64) bool { return v > pagesBefore })
	t.Logf("sent %d calls (%d while central was down), discarded %d at the site; telemetry of %g changes given up; mirror behind %d rows before central came back",
		before+during, during, len(discarded), failed, behind.lost)
	t.Logf("healed %s after central came back by %g feed pages: %s (lost must be 0, duplicates 0)",
		healedIn.Round(time.Millisecond), pages-pagesBefore, healed)
	if healed.siteRows != before+during || healed.exact != before+during {
		t.Errorf("%s; want all %d rows mirrored exactly", healed, before+during)
	}
}

// TestSiteKilledTurnsStaleThenDisconnected: every node of a site is
// killed (SIGKILL). Central's Sites, and its /metrics, show the site
// connected, then stale after outbox.site_stale_after, then disconnected
// after site_disconnected_after, each within a bound of its time; the
// nodes restarted, the site is connected again, led, and its counts — the
// backlog and the parked calls its leader reports, the mirror's rows — are
// what they were.
func TestSiteKilledTurnsStaleThenDisconnected(t *testing.T) {
	erp := newERPSystem(t) // down: every call answers 503
	c := newCentralWith(t, core.Config{SiteStaleAfter: testStaleAfter, SiteDisconnectedAfter: testDisconnectedAfter})
	c.up()
	cm := c.serveCentralMetrics(t)
	g := newSiteGroup(t, c, siteSpec{Extra: twoSystems(erp), ReportInterval: testReportInterval, Metrics: true})
	g.startAll()
	g.leader()

	const parked, backlog = 6, 3
	clients := nodeClients(t, g)
	waitTracked(t, g, clients, callsTo(t, g.client, "erp", parked), "parked", func(op ports.Operation) bool { return op.Status == ports.OpParked })
	waitTracked(t, g, clients, callsTo(t, g.client, "slow", backlog), "waiting an hour for a retry", func(op ports.Operation) bool {
		return op.Status == ports.OpPending && op.RetryCount == 0
	})

	// The counts central shows, from the leader's health, on Sites and on
	// /metrics.
	countsRight := func(what string, since time.Time) ports.SiteView {
		t.Helper()
		var v ports.SiteView
		waittest.For(t, opWait, what, func() (bool, string) {
			sites, err := c.svc.Sites(context.Background())
			if err != nil {
				return false, err.Error()
			}
			for _, s := range sites {
				if s.Site == g.site {
					v = s
				}
			}
			h, ok := leaderHealth(v)
			if v.State != ports.SiteConnected || !ok || h.ReportedAt.Before(since) {
				return false, fmt.Sprintf("%s, leader %q, newest report %s", v.State, v.Leader, v.LastContact)
			}
			calls := opStats(h, ports.OpCall)
			if calls.Parked != parked || calls.Backlog != backlog || h.Backlog != 0 || v.Calls.Parked != parked {
				return false, fmt.Sprintf("leader %s reports calls %+v, notifications %d; the mirror %d parked", v.Leader, calls, h.Backlog, v.Calls.Parked)
			}
			body, err := scrape(cm)
			if err != nil {
				return false, err.Error()
			}
			site := `site="` + g.site + `"`
			for _, m := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"outbox_site_state", []string{site, `state="connected"`}, 1},
				{"outbox_site_reported_parked", []string{site, `kind="call"`}, parked},
				{"outbox_site_reported_backlog", []string{site, `kind="call"`}, backlog},
				{"outbox_site_reported_backlog", []string{site, `kind="notification"`}, 0},
			} {
				if got, ok := metricSum(body, m.name, m.labels...); !ok || got != m.want {
					return false, fmt.Sprintf("central's /metrics: %s%v = %g (found %t), want %g", m.name, m.labels, got, ok, m.want)
				}
			}
			return true, ""
		})
		return v
	}
	first := countsRight("the site connected, its counts at central", time.Time{})

	for _, n := range g.nodes {
		n.kill()
	}
	killed := time.Now()
	// Watch the state go by, noting when each was first seen and how long
	// after the newest report.
	seen := map[ports.SiteState]time.Duration{}
	var order []ports.SiteState
	waittest.For(t, time.Minute, "the killed site disconnected", func() (bool, string) {
		sites, err := c.svc.Sites(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, s := range sites {
			if s.Site != g.site {
				continue
			}
			if _, ok := seen[s.State]; !ok {
				seen[s.State] = time.Since(s.LastContact)
				order = append(order, s.State)
			}
			return s.State == ports.SiteDisconnected, fmt.Sprintf("%s, last contact %s ago", s.State, time.Since(s.LastContact).Round(time.Millisecond))
		}
		return false, "no site " + g.site
	})
	body, err := scrape(cm)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := metricSum(body, "outbox_site_state", `site="`+g.site+`"`, `state="disconnected"`); v != 1 {
		t.Errorf("central's /metrics does not show the site disconnected")
	}
	if age, ok := metricSum(body, "outbox_site_last_contact_seconds", `site="`+g.site+`"`); !ok || age < testDisconnectedAfter.Seconds() {
		t.Errorf("central's /metrics: last contact %gs ago (found %t); want at least %s", age, ok, testDisconnectedAfter)
	}
	// Each state shows within a bound of its time: polling Sites every
	// 20 ms on a loaded machine is late by far less than the slack.
	const slack = 3 * time.Second
	if len(order) != 3 || order[0] != ports.SiteConnected || order[1] != ports.SiteStale || order[2] != ports.SiteDisconnected {
		t.Errorf("states seen %v; want connected, stale, disconnected", order)
	}
	if d := seen[ports.SiteStale]; d <= testStaleAfter || d > testStaleAfter+slack {
		t.Errorf("stale first seen %s after the last report; want within (%s, %s]", d, testStaleAfter, testStaleAfter+slack)
	}
	if d := seen[ports.SiteDisconnected]; d <= testDisconnectedAfter || d > testDisconnectedAfter+slack {
		t.Errorf("disconnected first seen %s after the last report; want within (%s, %s]", d, testDisconnectedAfter, testDisconnectedAfter+slack)
	}

	restarted := time.Now()
	g.startAll()
	lead := g.leader()
	back := countsRight("the restarted site connected again, its counts as before", restarted)
	lc, err := notify.Dial(lead.api)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	mirror := waitMirrorConverged(t, c, g, lc, "the mirror matches the restarted site")
	syncs := waitNodeMetric(t, lead, "outbox_site_link_syncs_total", "Syncs since the restart", func(v float64) bool { return v > 0 })
	t.Logf("sent %d calls (%d parked, %d waiting); killed every node %s after the site was first seen connected (leader %s)",
		parked+backlog, parked, backlog, killed.Sub(first.LastContact).Round(time.Millisecond), first.Leader)
	t.Logf("states %v, stale seen %s and disconnected %s after the last report (thresholds %s, %s); back connected %s after the restart, led by %s, %g Syncs by the new leader",
		order, seen[ports.SiteStale].Round(time.Millisecond), seen[ports.SiteDisconnected].Round(time.Millisecond),
		testStaleAfter, testDisconnectedAfter, back.LastContact.Sub(restarted).Round(time.Millisecond), back.Leader, syncs)
	t.Logf("mirror after the restart: %s (lost must be 0, duplicates 0)", mirror)
	if mirror.siteRows != parked+backlog {
		t.Errorf("the site holds %d rows after the restart, want %d", mirror.siteRows, parked+backlog)
	}
}

// leaderHealth is the health of the node that leads v, as central last
// had it.
func leaderHealth(v ports.SiteView) (ports.SiteNodeHealth, bool) {
	for _, n := range v.Nodes {
		if n.Node == v.Leader && v.Leader != "" {
			return n, true
		}
	}
	return ports.SiteNodeHealth{}, false
}

// opStats returns h's counts of kind.
func opStats(h ports.SiteNodeHealth, kind ports.OpKind) ports.OpKindStats {
	for _, s := range h.Operations {
		if s.Kind == kind {
			return s
		}
	}
	return ports.OpKindStats{Kind: kind}
}
