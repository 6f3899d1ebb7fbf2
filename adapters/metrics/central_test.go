package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/clocktest"
	"github.com/siteline/outbox/ports/waittest"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// scrapeCentral serves /metrics through CentralHandler and returns its text.
func scrapeCentral(t *testing.T, src CentralSources, dm *DeliveryMetrics) string {
	t.Helper()
	h, err := CentralHandler(src, dm, discard())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestCentralCollectorExportsKPIsAndPlugins(t *testing.T) {
	var asked bool
	src := CentralSources{
		KPIs: func(ctx context.Context) (ports.KPIReport, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("the KPI read has no deadline")
			}
			asked = true
			return ports.KPIReport{At: time.Now(), Window: time.Hour,
				Global: ports.KPI{QueueDepth: 12, Stuck: 3, Parked: 4, Delivered: 250, OldestPendingAge: 90 * time.Second},
				Sites: []ports.SiteKPI{
					{Site: "plant-1", KPI: ports.KPI{QueueDepth: 10, Stuck: 3, Parked: 1, Delivered: 200, OldestPendingAge: 90 * time.Second}},
					{Site: "plant-2", KPI: ports.KPI{QueueDepth: 2, Parked: 3, Delivered: 50, OldestPendingAge: 1500 * time.Millisecond}},
				}}, nil
		},
		Window: time.Hour,
		Plugins: func() []ports.PluginStatus {
			return []ports.PluginStatus{{Type: "email", Running: true, Restarts: 2, StoppedAnswering: 1}, {Type: "webhook", Running: false}}
		},
	}
	// The pedantic registry checks that Collect matches Describe.
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
	if !asked {
		t.Fatal("the collector did not read the KPIs")
	}
	for _, want := range []string{
		"outbox_kpi_up 1",
		"outbox_queue_depth 12",
		"outbox_stuck 3",
		"outbox_parked 4",
		"outbox_delivered_recent 250",
		"# HELP outbox_delivered_recent Notifications delivered in the last 1h0m0s.",
		"outbox_delivered_recent_window_seconds 3600",
		"outbox_oldest_pending_age_seconds 90",
		`outbox_central_site_queue_depth{site="plant-1"} 10`,
		`outbox_central_site_queue_depth{site="plant-2"} 2`,
		`outbox_central_site_stuck{site="plant-1"} 3`,
		`outbox_central_site_stuck{site="plant-2"} 0`,
		`outbox_central_site_parked{site="plant-2"} 3`,
		`outbox_central_site_delivered_recent{site="plant-1"} 200`,
		`outbox_central_site_oldest_pending_age_seconds{site="plant-2"} 1.5`,
		`outbox_plugin_up{plugin="email"} 1`,
		`outbox_plugin_up{plugin="webhook"} 0`,
		"# TYPE outbox_plugin_restarts_total counter",
		`outbox_plugin_restarts_total{plugin="email"} 2`,
		`outbox_plugin_restarts_total{plugin="webhook"} 0`,
		"# TYPE outbox_plugin_stopped_answering_total counter",
		`outbox_plugin_stopped_answering_total{plugin="email"} 1`,
		`outbox_plugin_stopped_answering_total{plugin="webhook"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(body, "\ngo_goroutines ") {
		t.Error("/metrics lacks the Go runtime collector")
	}
	if strings.Contains(body, "outbox_site_") {
		t.Errorf("central exports names of the site collector:\n%s", grep(body, "outbox_site_"))
	}
}

func TestCentralCollectorReportsAFailedKPIRead(t *testing.T) {
	body := scrapeCentral(t, CentralSources{
		KPIs: func(context.Context) (ports.KPIReport, error) { return ports.KPIReport{}, errors.New("store down") },
		Plugins: func() []ports.PluginStatus {
			return []ports.PluginStatus{{Type: "email", Running: true, Restarts: 1}}
		},
	}, NewDeliveryMetrics())
	if !strings.Contains(body, "outbox_kpi_up 0\n") || strings.Contains(body, "outbox_queue_depth ") ||
		strings.Contains(body, "outbox_central_site_queue_depth{") {
		t.Errorf("a failed KPI read:\n%s", grep(body, "outbox_"))
	}
	if !strings.Contains(body, `outbox_plugin_up{plugin="email"} 1`) {
		t.Errorf("the plugins are not exported when the KPIs fail:\n%s", grep(body, "outbox_plugin"))
	}
}

func TestCentralCollectorNeedsKPIs(t *testing.T) {
	if _, err := NewCentralCollector(CentralSources{}, nil); err == nil {
		t.Error("a collector without KPIs was built")
	}
	if _, err := CentralHandler(CentralSources{KPIs: func(context.Context) (ports.KPIReport, error) {
		return ports.KPIReport{}, nil
	}}, nil, nil); err == nil {
		t.Error("a central handler without delivery metrics was built")
	}
}

func TestDeliveryMetricsCountAttemptsAndDurations(t *testing.T) {
	m := NewDeliveryMetrics("email", "slack")
	m.Attempted("email", ports.OutcomeSuccess, 3*time.Millisecond, []ports.Outcome{ports.OutcomeSuccess})
	m.Attempted("email", ports.OutcomeSuccess, 40*time.Millisecond, []ports.Outcome{ports.OutcomeSuccess, ports.OutcomeSuccess})
	m.Attempted("email", ports.OutcomeTransient, 2*time.Second,
		[]ports.Outcome{ports.OutcomeSuccess, ports.OutcomeTransient, ports.OutcomePermanent})
	m.Attempted("webhook", ports.OutcomePermanent, 90*time.Second, nil)

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}

	counts := map[string]float64{}
	for _, mm := range byName["outbox_delivery_attempts_total"].GetMetric() {
		counts[labels(mm)] = mm.GetCounter().GetValue()
	}
	perTarget := map[string]float64{}
	for _, mm := range byName["outbox_target_attempts_total"].GetMetric() {
		perTarget[labels(mm)] = mm.GetCounter().GetValue()
	}
	for key, want := range map[string]float64{
		"channel=email,outcome=success":   4,
		"channel=email,outcome=transient": 1,
		"channel=email,outcome=permanent": 1,
		"channel=slack,outcome=success":   0, // created at zero
	} {
		if got, ok := perTarget[key]; !ok || got != want {
			t.Errorf("target attempts{%s} = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for key, want := range map[string]float64{
		"channel=email,outcome=success":     2,
		"channel=email,outcome=transient":   1,
		"channel=email,outcome=permanent":   0,
		"channel=webhook,outcome=permanent": 1,
		"channel=slack,outcome=success":     0, // created at zero
	} {
		if got, ok := counts[key]; !ok || got != want {
			t.Errorf("attempts{%s} = %v (present %v), want %v", key, got, ok, want)
		}
	}
	if _, ok := counts["channel=webhook,outcome=success"]; ok {
		t.Error("a series of a channel not named and never seen with that outcome exists")
	}

	hists := map[string]*dto.Histogram{}
	for _, mm := range byName["outbox_delivery_attempt_duration_seconds"].GetMetric() {
		hists[labels(mm)] = mm.GetHistogram()
	}
	email := hists["channel=email"]
	if email.GetSampleCount() != 3 || !near(email.GetSampleSum(), 2.043) {
		t.Errorf("email durations: %d samples, sum %v; want 3, 2.043", email.GetSampleCount(), email.GetSampleSum())
	}
	cumulative := map[float64]uint64{}
	for _, b := range email.GetBucket() {
		cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for le, want := range map[float64]uint64{.001: 0, .005: 1, .05: 2, 1: 2, 2.5: 3, 60: 3} {
		if cumulative[le] != want {
			t.Errorf("email durations le=%v: %d, want %d", le, cumulative[le], want)
		}
	}
	if b := email.GetBucket(); b[0].GetUpperBound() != .001 || b[len(b)-1].GetUpperBound() != 60 {
		t.Errorf("buckets from %v to %v, want 0.001 to 60", b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
	}
	if wh := hists["channel=webhook"]; wh.GetSampleCount() != 1 || wh.GetBucket()[len(wh.GetBucket())-1].GetCumulativeCount() != 0 {
		t.Errorf("a 90 s attempt must count, above the last bucket: %v", wh)
	}
	if hists["channel=slack"].GetSampleCount() != 0 {
		t.Error("slack has durations without an attempt")
	}
}

// labels renders a metric's labels as name=value,… in name order.
func labels(m *dto.Metric) string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(out, ",")
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// countingKPIs is a KPI source that counts its reads and, while gate is
// open (not nil), holds each read until the gate is closed.
type countingKPIs struct {
	reads atomic.Int64
	gate  chan struct{}
}

func (k *countingKPIs) read(ctx context.Context) (ports.KPIReport, error) {
	k.reads.Add(1)
	if k.gate != nil {
		select {
		case <-k.gate:
		case <-ctx.Done():
			return ports.KPIReport{}, ctx.Err()
		}
	}
	return ports.KPIReport{Window: time.Hour, Global: ports.KPI{QueueDepth: 7}}, nil
}

// servedCollector serves c with the delivery metrics on a real HTTP server
// and returns its /metrics URL.
func servedCollector(t *testing.T, c *CentralCollector) string {
	t.Helper()
	h, err := Handler(c, NewDeliveryMetrics("email"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func scrapeURL(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "outbox_queue_depth 7") {
		return fmt.Errorf("scrape: %d %s", resp.StatusCode, b)
	}
	return nil
}

// TestScrapesShareOneKPIRead plays eight scrapers hitting the public
// /metrics at once and then again within the window: the database is read
// once for all of them; a scrape after the window reads again.
func TestScrapesShareOneKPIRead(t *testing.T) {
	kpis := &countingKPIs{gate: make(chan struct{})}
	c, err := NewCentralCollector(CentralSources{KPIs: kpis.read}, discard())
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Unix(1e9, 0))
	c.kpis.now = clock.Now
	url := servedCollector(t, c)

	const scrapers = 8
	errs := make(chan error, scrapers)
	for range scrapers {
		go func() { errs <- scrapeURL(url) }()
	}
	// Wait until one read is in flight and every other scrape waits for it.
	waittest.For(t, 20*time.Second, "one read in flight, every other scrape joined to it", func() (bool, string) {
		c.kpis.mu.Lock()
		joined := c.kpis.joined
		c.kpis.mu.Unlock()
		return joined == scrapers-1 && kpis.reads.Load() == 1,
			fmt.Sprintf("%d scrapes joined the read in flight, %d reads", joined, kpis.reads.Load())
	})
	close(kpis.gate)
	for range scrapers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if err := scrapeURL(url); err != nil {
			t.Fatal(err)
		}
	}
	if n := kpis.reads.Load(); n != 1 {
		t.Fatalf("%d KPI reads for %d scrapes within the window, want 1", n, scrapers+20)
	}
	clock.Advance(DefaultKPICacheFor)
	if err := scrapeURL(url); err != nil {
		t.Fatal(err)
	}
	if n := kpis.reads.Load(); n != 2 {
		t.Fatalf("%d KPI reads after the window, want 2", n)
	}
}

// TestNegativeCacheForReadsAtEveryScrape: with the cache off, each scrape
// reads the KPIs.
func TestNegativeCacheForReadsAtEveryScrape(t *testing.T) {
	kpis := &countingKPIs{}
	c, err := NewCentralCollector(CentralSources{KPIs: kpis.read, CacheFor: -1}, discard())
	if err != nil {
		t.Fatal(err)
	}
	url := servedCollector(t, c)
	for range 3 {
		if err := scrapeURL(url); err != nil {
			t.Fatal(err)
		}
	}
	if n := kpis.reads.Load(); n != 3 {
		t.Fatalf("%d reads for 3 scrapes, want 3", n)
	}
}
