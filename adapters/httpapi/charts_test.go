package httpapi_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// svgRect is a bar of a chart as the page draws it: a subpath of its
// outcome's path.
type svgRect struct {
	Kind   string
	Start  string
	N      int64
	Height string
	// Title is the tooltip of the bar's path (of every bar of its kind).
	Title string
}

// chartBars parses the SVG chart of id out of a page and returns its bars
// by "kind@start": each outcome is one path, a rectangle ("M x y h w v h
// h -w z", then "m dx dy ...") per bucket its data-n lists ("index:count ...", the index
// counted in buckets of data-bucket-seconds from the svg's data-from).
func chartBars(t *testing.T, page, id string) map[string]svgRect {
	t.Helper()
	m := regexp.MustCompile(`(?s)<svg id="chart-` + regexp.QuoteMeta(id) + `".*?</svg>`).FindString(page)
	if m == "" {
		t.Fatalf("no chart %s on the page:\n%s", id, page)
	}
	var svg struct {
		From   string     `xml:"data-from,attr"`
		Bucket int64      `xml:"data-bucket-seconds,attr"`
		Rects  []struct{} `xml:"rect"`
		Paths  []struct {
			Kind  string `xml:"data-kind,attr"`
			N     string `xml:"data-n,attr"`
			D     string `xml:"d,attr"`
			Title string `xml:"title"`
		} `xml:"path"`
	}
	if err := xml.Unmarshal([]byte(m), &svg); err != nil {
		t.Fatalf("chart %s is not well-formed SVG: %v\n%s", id, err, m)
	}
	if len(svg.Rects) != 0 {
		t.Errorf("chart %s draws %d rect elements: its bars are paths", id, len(svg.Rects))
	}
	from, err := time.Parse(time.RFC3339, svg.From)
	if err != nil || svg.Bucket <= 0 {
		t.Fatalf("chart %s: data-from %q, data-bucket-seconds %d", id, svg.From, svg.Bucket)
	}
	out := map[string]svgRect{}
	for _, p := range svg.Paths {
		counts := strings.Fields(p.N)
		heights := regexp.MustCompile(`[Mm]-?[0-9.]+ -?[0-9.]+h[0-9.]+v([0-9.]+)h-[0-9.]+z`).FindAllStringSubmatch(p.D, -1)
		if len(heights) != len(counts) {
			t.Fatalf("chart %s: the %s path has %d rectangles for %d counts: %s", id, p.Kind, len(heights), len(counts), p.D)
		}
		for i, c := range counts {
			var bucket int
			var n int64
			if _, err := fmt.Sscanf(c, "%d:%d", &bucket, &n); err != nil {
				t.Fatalf("chart %s: count %q: %v", id, c, err)
			}
			start := from.Add(time.Duration(bucket) * time.Duration(svg.Bucket) * time.Second).Format(time.RFC3339)
			out[p.Kind+"@"+start] = svgRect{Kind: p.Kind, Start: start, N: n, Height: heights[i][1], Title: p.Title}
		}
	}
	return out
}

// seedOutcomes stores, around now: at five minutes ago, three deliveries
// (plant-1 email twice, plant-2 sms) and a failed attempt (plant-1
// email); three hours ago, a parking (plant-2 sms).
func seedOutcomes(t *testing.T, e *env, now time.Time) (recent, earlier time.Time) {
	t.Helper()
	ctx := context.Background()
	recent, earlier = now.Add(-5*time.Minute), now.Add(-3*time.Hour)
	row := func(site, typ string, st ports.Status) ports.Notification {
		return ports.Notification{ID: uuid.NewString(), Type: typ, List: "ok", Subject: "s", Body: "b", Status: st,
			SourceSite: site, CreatedAt: earlier.Add(-time.Hour), UpdatedAt: earlier}
	}
	var ns []ports.Notification
	var recs []ports.AuditRecord
	for _, d := range []struct{ site, typ string }{{"plant-1", "email"}, {"plant-1", "email"}, {"plant-2", "sms"}} {
		n := row(d.site, d.typ, ports.StatusDelivered)
		n.DeliveredAt = recent
		ns = append(ns, n)
	}
	failing := row("plant-1", "email", ports.StatusRetrying)
	failing.NextAttemptAt = now.Add(time.Hour) // not due while the test runs
	parked := row("plant-2", "sms", ports.StatusParked)
	ns = append(ns, failing, parked)
	recs = append(recs,
		ports.AuditRecord{NotificationID: failing.ID, SourceSite: failing.SourceSite, Type: failing.Type, At: recent, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
			Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying, Error: "451"},
		ports.AuditRecord{NotificationID: parked.ID, SourceSite: parked.SourceSite, Type: parked.Type, At: earlier, Kind: ports.AuditParked, Actor: ports.ActorSystem,
			Status: ports.StatusParked, Error: "550"})
	if _, err := e.store.Insert(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Append(ctx, recs); err != nil {
		t.Fatal(err)
	}
	return recent, earlier
}

// TestDashboardChartsDrawTheOutcomes: the dashboard's SVG charts have a bar
// per outcome and bucket, of the seeded counts, scaled to the plot, in
// total, per site and for one type; the delivered tile shows a rate.
func TestDashboardChartsDrawTheOutcomes(t *testing.T) {
	e := newEnv(t)
	recent, earlier := seedOutcomes(t, e, time.Now().UTC())
	minute := recent.Truncate(time.Minute).Format(time.RFC3339)
	hour := recent.Truncate(time.Hour).Format(time.RFC3339)
	earlierHour := earlier.Truncate(time.Hour).Format(time.RFC3339)
	browser := e.loginBrowser("viewer")

	check := func(bars map[string]svgRect, what string, want map[string]int64) {
		t.Helper()
		for k, n := range want {
			if bars[k].N != n {
				t.Errorf("%s: bar %s = %+v, want %d", what, k, bars[k], n)
			}
		}
		if len(bars) != len(want) {
			t.Errorf("%s: %d bars %v, want %d", what, len(bars), bars, len(want))
		}
	}

	code, page := e.get(browser, "/dashboard")
	if code != http.StatusOK {
		t.Fatalf("dashboard: %d", code)
	}
	hourBars := chartBars(t, page, "hour")
	check(hourBars, "last hour", map[string]int64{"delivered@" + minute: 3, "failed@" + minute: 1})
	// The bucket's total is 4: the scale tops at 5 over 120 units.
	if h := hourBars["delivered@"+minute].Height; h != "72" {
		t.Errorf("delivered bar height %s, want 72 (3 of 5 over 120)", h)
	}
	if !strings.Contains(hourBars["delivered@"+minute].Title, "3 delivered, at most 3 in one minute") {
		t.Errorf("bar title %q", hourBars["delivered@"+minute].Title)
	}
	check(chartBars(t, page, "days"), "last days", map[string]int64{"delivered@" + hour: 3, "failed@" + hour: 1, "parked@" + earlierHour: 1})
	// 3 delivered in the rate's 15 minutes: 0.2 a minute.
	if !regexp.MustCompile(`data-kpi="delivered">\s*<span class="label">Delivered</span><span class="value">0.2<span class="unit">/min</span>`).MatchString(page) {
		t.Errorf("the delivered tile shows no rate:\n%s", page)
	}

	_, page = e.get(browser, "/dashboard?days=3")
	if !strings.Contains(page, `<option value="3" selected>3</option>`) {
		t.Error("the days selector does not show the 3 days asked for")
	}
	_, page = e.get(browser, "/dashboard?by=site&days=2")
	check(chartBars(t, page, "hour-plant-1"), "plant-1", map[string]int64{"delivered@" + minute: 2, "failed@" + minute: 1})
	check(chartBars(t, page, "hour-plant-2"), "plant-2", map[string]int64{"delivered@" + minute: 1})
	check(chartBars(t, page, "days-plant-2"), "plant-2 days", map[string]int64{"delivered@" + hour: 1, "parked@" + earlierHour: 1})
	if strings.Contains(page, `id="chart-hour"`) {
		t.Error("a split page still shows the total chart")
	}

	_, page = e.get(browser, "/dashboard?type=sms&by=type")
	check(chartBars(t, page, "hour-sms"), "sms", map[string]int64{"delivered@" + minute: 1})
	if strings.Contains(page, `id="chart-hour-email"`) {
		t.Error("a page for sms shows email")
	}

	for _, bad := range []string{"/dashboard?days=0", "/dashboard?days=99", "/dashboard?by=list", "/dashboard?days=" + strings.Repeat("9", 5000)} {
		if code, _ := e.get(browser, bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad[:min(len(bad), 40)], code)
		}
	}
}

// TestThroughputAPI: GET /api/v1/throughput answers viewers with the
// buckets, refuses the unauthenticated and bad parameters with the
// parameter named.
func TestThroughputAPI(t *testing.T) {
	e := newEnv(t)
	recent, _ := seedOutcomes(t, e, time.Now().UTC())
	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/throughput?window=1h&by=site", nil)
	if code != http.StatusOK {
		t.Fatalf("throughput: %d %s", code, body)
	}
	var tp api.Throughput
	if err := json.Unmarshal(body, &tp); err != nil {
		t.Fatal(err)
	}
	if tp.BucketSeconds != 60 || tp.By != "site" || len(tp.Series) != 2 || tp.Series[0].Key != "plant-1" ||
		tp.Series[0].Total != (api.ThroughputCounts{Delivered: 2, Failed: 1}) || len(tp.Series[0].Delivered) != 60 {
		t.Fatalf("throughput: %s", body)
	}
	i := int(recent.Sub(tp.From) / time.Minute)
	if tp.Series[0].Delivered[i] != 2 || tp.Series[0].Failed[i] != 1 || tp.Series[1].Delivered[i] != 1 {
		t.Errorf("bucket %d: %s", i, body)
	}

	code, body = e.do(ports.RoleViewer, "GET", "/api/v1/throughput?window=7d&type=sms", nil)
	if err := json.Unmarshal(body, &tp); code != http.StatusOK || err != nil || tp.BucketSeconds != 3600 || len(tp.Series) != 1 ||
		tp.Series[0].Total != (api.ThroughputCounts{Delivered: 1, Parked: 1}) {
		t.Errorf("7 days of sms: %d %s", code, body)
	}

	if code, _ := e.do("", "GET", "/api/v1/throughput", nil); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	for q, param := range map[string]string{
		"window=forever": "window", "window=90d": "window", "bucket=1s&window=7d": "bucket",
		"bucket=1500ms": "bucket", "by=list": "by", "end=yesterday": "end",
	} {
		code, body := e.do(ports.RoleViewer, "GET", "/api/v1/throughput?"+q, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), param) {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, body, param)
		}
	}
}

// TestKPIsCarryTheRate: GET /kpis carries the delivered rate and its window.
func TestKPIsCarryTheRate(t *testing.T) {
	e := newEnv(t)
	seedOutcomes(t, e, time.Now().UTC())
	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/kpis", nil)
	var k api.KPIReport
	if err := json.Unmarshal(body, &k); code != http.StatusOK || err != nil {
		t.Fatalf("kpis: %d %s", code, body)
	}
	if k.RateWindowSeconds != 900 || k.Global.DeliveredPerMinute != 0.2 || k.Global.Delivered != 0 {
		t.Errorf("kpis: %s", body)
	}
}

// fixedClock is a clock that stands still.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestThroughputWindowOnTheServerClock: GET /api/v1/throughput reads "now"
// off the server's clock, and a window that is not a whole number of
// buckets starts on a whole bucket: 90 minutes in hours at 10:20 is 09:00
// to 11:00, not 09:30 to 10:30 (an hour bucket that straddles two hours
// of the clock).
func TestThroughputWindowOnTheServerClock(t *testing.T) {
	now := time.Date(2026, 6, 2, 10, 20, 30, 0, time.UTC)
	e := newEnvWith(t, func(c *httpapi.Config) { c.Clock = fixedClock(now) })
	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/throughput?window=90m&bucket=1h", nil)
	var tp api.Throughput
	if err := json.Unmarshal(body, &tp); code != http.StatusOK || err != nil {
		t.Fatalf("throughput: %d %s", code, body)
	}
	if want := time.Date(2026, 6, 2, 9, 0, 0, 0, time.UTC); !tp.From.Equal(want) || !tp.To.Equal(want.Add(2*time.Hour)) ||
		len(tp.Series) != 1 || len(tp.Series[0].Delivered) != 2 {
		t.Errorf("90 minutes in hours at 10:20:30: %s", body)
	}
	for _, q := range []string{"end=2263-01-01T00:00:00Z", "by=total", "by=all"} {
		if code, body := e.do(ports.RoleViewer, "GET", "/api/v1/throughput?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
}

// throughputSpy counts the throughput queries the server asks.
type throughputSpy struct {
	ports.Outbox
	mu    sync.Mutex
	asked []ports.ThroughputQuery
}

func (s *throughputSpy) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	s.mu.Lock()
	s.asked = append(s.asked, q)
	s.mu.Unlock()
	return s.Outbox.Throughput(ctx, q)
}

// take returns the queries asked since the last take, as "from-to/bucket"
// in minutes before now.
func (s *throughputSpy) take(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, q := range s.asked {
		out = append(out, fmt.Sprintf("%.0f-%.0f/%s", now.Sub(q.From).Minutes(), now.Sub(q.To).Minutes(), q.Bucket))
	}
	s.asked = nil
	return out
}

// stepClock is a clock a test moves.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// TestDashboardReadsClosedHoursOnce: the daily chart's closed hours are read
// once and kept; a refresh reads the last hour's minutes and the hour in
// progress only, and what happens in it shows at once. When the hour turns,
// the closed hours are read again.
func TestDashboardReadsClosedHoursOnce(t *testing.T) {
	now := time.Date(2026, 6, 2, 10, 20, 0, 0, time.UTC)
	clock := &stepClock{now: now}
	var spy *throughputSpy
	e := newEnvWith(t, func(c *httpapi.Config) {
		spy = &throughputSpy{Outbox: c.Outbox}
		c.Outbox, c.Clock = spy, clock
	})
	seedOutcomes(t, e, now)
	browser := e.loginBrowser("viewer")
	closedHours := "10040-20/1h0m0s" // 7 days to 11:00 (in minutes before 10:20), but the hour in progress
	if _, page := e.get(browser, "/dashboard"); !strings.Contains(page, `id="chart-days"`) {
		t.Fatal("no daily chart")
	}
	if got := spy.take(now); !slices.Contains(got, closedHours) || len(got) != 3 {
		t.Errorf("the first view asked %q; want the minutes, the closed hours (%s) and the hour in progress", got, closedHours)
	}
	// A delivery in the hour in progress shows on the next refresh.
	n := ports.Notification{ID: uuid.NewString(), Type: "email", List: "ok", Subject: "s", Status: ports.StatusDelivered,
		SourceSite: "plant-1", CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Minute), DeliveredAt: now.Add(-time.Minute)}
	if _, err := e.store.Insert(t.Context(), []ports.Notification{n}); err != nil {
		t.Fatal(err)
	}
	_, page := e.get(browser, "/dashboard")
	if got := spy.take(now); slices.Contains(got, closedHours) || len(got) != 2 {
		t.Errorf("a refresh asked %q; want the minutes and the hour in progress alone", got)
	}
	if bars := chartBars(t, page, "days"); bars["delivered@"+now.Truncate(time.Hour).Format(time.RFC3339)].N != 4 {
		t.Errorf("the hour in progress after a delivery: %+v, want 4 delivered", bars)
	}
	clock.set(now.Add(time.Hour))
	e.get(browser, "/dashboard")
	if got := spy.take(now.Add(time.Hour)); !slices.Contains(got, closedHours) {
		t.Errorf("after the hour turned, asked %q; want the closed hours read again", got)
	}
}

// TestDashboardSplitViewStaysSmall: thirty sites busy every hour of a
// week and every minute of the last hour, one chart per site: at most
// maxSplitDays days are drawn, whatever is asked, each outcome of a chart
// is one path, and the page stays under 600 kB (a bar per element drew
// 29,000 <rect>s, 6 MB, for 31 days).
func TestDashboardSplitViewStaysSmall(t *testing.T) {
	now := time.Date(2026, 6, 2, 10, 20, 0, 0, time.UTC)
	e := newEnvWith(t, func(c *httpapi.Config) { c.Clock = fixedClock(now) })
	var ns []ports.Notification
	var recs []ports.AuditRecord
	for s := range 30 {
		site := fmt.Sprintf("plant-%02d", s)
		at := func(d time.Duration) ports.Notification {
			return ports.Notification{ID: uuid.NewString(), Type: "email", List: "ok", Subject: "s", Status: ports.StatusDelivered,
				SourceSite: site, CreatedAt: now.Add(-d), UpdatedAt: now.Add(-d), DeliveredAt: now.Add(-d)}
		}
		for h := range 31 * 24 {
			n := at(time.Duration(h)*time.Hour + time.Minute)
			ns = append(ns, n)
			recs = append(recs,
				ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: "email", At: n.DeliveredAt, Kind: ports.AuditAttempted,
					Actor: ports.ActorSystem, Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying},
				ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: "email", At: n.DeliveredAt, Kind: ports.AuditParked,
					Actor: ports.ActorSystem, Status: ports.StatusParked})
		}
		for m := range 60 {
			ns = append(ns, at(time.Duration(m)*time.Minute+time.Second))
		}
	}
	if _, err := e.store.Insert(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Append(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	browser := e.loginBrowser("viewer")
	code, page := e.get(browser, "/dashboard?by=site&days=31")
	if code != http.StatusOK {
		t.Fatalf("by site over 31 days: %d", code)
	}
	t.Logf("one chart per site, 30 sites, 7 days: %d bytes, %d paths", len(page), strings.Count(page, "<path "))
	if !strings.Contains(page, "Last 7 days, per hour (at most 7 with one chart per site or type)") ||
		strings.Contains(page, `<option value="31"`) {
		t.Error("a split view does not say it shows 7 days, or offers more")
	}
	bars := chartBars(t, page, "days-plant-07")
	if len(bars) != 3*7*24 {
		t.Errorf("plant-07's daily chart has %d bars, want 3 outcomes in each of 7 days' hours", len(bars))
	}
	if n := strings.Count(page, "<path "); n != 30*2*3 {
		t.Errorf("%d paths, want one per outcome of each of 60 charts", n)
	}
	if len(page) > 600_000 {
		t.Errorf("the page is %d bytes, want at most 600 kB", len(page))
	}
	code, page = e.get(browser, "/dashboard?days=31")
	if code != http.StatusOK || len(chartBars(t, page, "days")) != 3*31*24 {
		t.Errorf("the total over 31 days: %d, %d bars", code, len(chartBars(t, page, "days")))
	}
	t.Logf("one chart, 31 days: %d bytes", len(page))
}
