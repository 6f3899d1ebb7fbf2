package acceptance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// seedWeek stores a week of outcomes up to now over four sites and three
// channel types: deliveries by the hour in a daily rhythm, a few failed
// attempts and parkings, a burst of failures at one site two days ago, and
// one delivery or two a minute over the last hour.
func seedWeek(t *testing.T, store *memstore.Store, now time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(17, 8))
	sites := []string{"plant-1", "plant-2", "plant-3", "warehouse"}
	types := []string{"email", "sms", "webhook"}
	var ns []ports.Notification
	var recs []ports.AuditRecord
	add := func(at time.Time, outcome string) {
		site, typ := sites[rng.IntN(len(sites))], types[rng.IntN(len(types))]
		n := ports.Notification{ID: uuid.NewString(), Type: typ, List: "ops", Subject: "Pump pressure", Body: "b",
			SourceSite: site, CreatedAt: at.Add(-time.Second), UpdatedAt: at}
		switch outcome {
		case "delivered":
			n.Status, n.DeliveredAt = ports.StatusDelivered, at
			recs = append(recs, ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at, Kind: ports.AuditDelivered, Actor: ports.ActorSystem,
				Status: ports.StatusDelivered})
		case "failed":
			n.Status, n.RetryCount, n.NextAttemptAt = ports.StatusRetrying, 1, now.Add(time.Hour)
			recs = append(recs, ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
				Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying, Error: "451 try later"})
		case "parked":
			n.Status = ports.StatusParked
			recs = append(recs, ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at, Kind: ports.AuditParked, Actor: ports.ActorSystem,
				Status: ports.StatusParked, Error: "550 no such mailbox"})
		}
		ns = append(ns, n)
	}
	for h := 7*24 - 1; h >= 1; h-- {
		start := now.Truncate(time.Hour).Add(-time.Duration(h) * time.Hour)
		busy := 4 + 20*max(0, 1-abs(start.Hour()-13)/6.0) // a working-day rhythm
		for range int(busy) + rng.IntN(5) {
			add(start.Add(time.Duration(rng.IntN(3600))*time.Second), "delivered")
		}
		if rng.IntN(4) == 0 {
			add(start.Add(time.Duration(rng.IntN(3600))*time.Second), "failed")
		}
		if rng.IntN(12) == 0 {
			add(start.Add(time.Duration(rng.IntN(3600))*time.Second), "parked")
		}
		if h == 50 || h == 49 { // an outage
			for range 12 {
				add(start.Add(time.Duration(rng.IntN(3600))*time.Second), "failed")
			}
			add(start.Add(30*time.Minute), "parked")
		}
	}
	for m := 59; m >= 1; m-- {
		at := now.Add(-time.Duration(m) * time.Minute)
		for range rng.IntN(3) {
			add(at, "delivered")
		}
		if m == 17 || m == 16 {
			add(at, "failed")
			add(at, "failed")
		}
		if m == 9 {
			add(at, "parked")
		}
	}
	if _, err := store.Insert(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	if err := store.Append(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
}

func abs(x int) float64 { return float64(max(x, -x)) }

// TestDashboardChartsInChromium: the dashboard's throughput charts render in
// Chromium under the page's CSP (the bars take their colours from the
// stylesheet), in total and as small multiples per site; screenshots of
// both.
func TestDashboardChartsInChromium(t *testing.T) {
	exe := browserPath(t)
	store := memstore.New()
	dir, err := memdir.New([]ports.List{{Name: "ops", Type: "email", Targets: []string{"ops@example.com"}}},
		[]ports.ChannelSettings{{Type: "email"}, {Type: "sms"}, {Type: "webhook"}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: ports.SystemClock{},
		Channels: ports.ChannelMap{}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := servePage(t, svc, store, dir, nil)
	seedWeek(t, store, time.Now().UTC())

	br := newBrowser(t, exe, srv.URL)
	br.open("/login")
	br.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), pageAdmin),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	br.submit("log in", `form.login button[type="submit"]`)
	br.open("/dashboard")
	br.waitVisible("svg#chart-hour path.bar")
	br.waitVisible("svg#chart-days path.bar")
	// The bars are coloured by the stylesheet: no inline style is allowed.
	fills := run(br, "read the bars' colours", chromedp.Evaluate[[]string](`["delivered","failed","parked"].map(k =>
		getComputedStyle(document.querySelector("svg#chart-days path.bar."+k)).fill)`))
	if fmt.Sprint(fills) != "[rgb(31, 138, 76) rgb(183, 121, 31) rgb(192, 57, 43)]" {
		t.Errorf("bar colours %v, want the stylesheet's delivered, retrying and parked", fills)
	}
	// Each outcome's bars are one path, a rectangle per bucket its data-n
	// lists; the delivered path spans the busy minutes of the hour.
	bars := run(br, "count the bars", chromedp.Evaluate[int](`[...document.querySelectorAll("svg#chart-hour path.bar")]
		.reduce((n, p) => n + p.dataset.n.split(" ").length, 0)`))
	if bars < 20 {
		t.Errorf("%d bars in the last hour, want one per busy minute", bars)
	}
	if w := run(br, "measure the bars", chromedp.Evaluate[float64](`document.querySelector("svg#chart-hour path.bar.delivered").getBBox().width`)); w < 300 {
		t.Errorf("the delivered bars of the last hour span %.0f units of 600", w)
	}
	if tile := br.text(`[data-kpi="delivered"] .value`); tile == "0/min" || tile == "" {
		t.Errorf("the delivered tile reads %q, want a rate", tile)
	}
	br.screenshot("dashboard-charts.png")

	br.open("/dashboard?by=site&days=7")
	br.waitVisible("svg#chart-days-warehouse")
	charts := run(br, "count the charts", chromedp.Evaluate[int](`document.querySelectorAll("svg.chart-svg").length`))
	if charts != 8 {
		t.Errorf("%d charts per site, want 8 (4 sites, 2 windows)", charts)
	}
	br.screenshot("dashboard-charts-by-site.png")
	br.checkQuiet()
}
