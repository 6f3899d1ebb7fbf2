package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// The dashboard's throughput charts: delivered, failed and parked per
// minute over the last hour and per hour over the last days, in total or as
// small multiples per site or per channel type, drawn as server-side SVG
// (html/template writes it, escaping every text; the colours are classes of
// style.css, so the page's CSP needs no inline style).
//
// What a view costs is bounded: each chart is one <path> per outcome (not
// an element per bar), a split view shows at most maxSplitDays days, and
// the closed hours of the daily chart are read once and kept for
// chartCacheTTL (chartCache), so that the page's refresh reads the hour
// in progress and the last hour's minutes only.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartLeft   = 40 // room for the y-axis labels
	chartRight  = 6
	chartTop    = 8
	chartBottom = 18 // room for the time labels
	chartPlotW  = 600
	chartPlotH  = 120
	smallPlotH  = 60
)

// chartDays bounds the days of the daily chart (?days=); a split view
// (one chart per site or type) shows at most maxSplitDays.
const (
	defaultChartDays = 7
	maxChartDays     = 31
	maxSplitDays     = 7
)

// chartsView is what the dashboard shows of the throughput.
type chartsView struct {
	// The selection: site and type filters, the split, the days (cut to
	// maxSplitDays for a split: DaysCut), the days offered.
	Site, Type, By string
	Days           int
	DaysCut        bool
	DayChoices     []int
	// The options of the selectors.
	Sites, Types []string
	// Rows holds one row of two charts (last hour, last days) for the
	// total or for each key of the split.
	Rows []chartRow
	// HourFrom..HourTo and DaysFrom..DaysTo are the windows.
	HourFrom, HourTo, DaysFrom, DaysTo time.Time
}

// chartRow is one key's two charts.
type chartRow struct {
	Key        string
	Hour, Days chart
}

// chart is one SVG bar chart of stacked delivered, failed and parked.
type chart struct {
	// ID names the chart for tests and links: "hour" or "days", with the
	// key of a split ("hour-site-a").
	ID            string
	Width, Height int
	PlotTop       int
	PlotBottom    int
	PlotLeft      int
	PlotRight     int
	// YMax is the value of the top of the plot; YMid its middle line.
	YMax, YMid int64
	MidY       string
	// Paths holds one path per outcome that happened, its bars in one
	// path.
	Paths []chartPath
	Ticks []chartTick
	Total ports.ThroughputCounts
	// From is the first bucket's start (RFC 3339, UTC) and BucketSeconds
	// the buckets' length: with a path's Counts, where each bar is.
	From          string
	BucketSeconds int64
}

// chartPath is the bars of one outcome: a rectangle per bucket with a
// count, as subpaths of one path.
type chartPath struct {
	// Kind is delivered, failed or parked (its class and data-kind).
	Kind string
	D    string
	// Counts lists the buckets with a count: "index:count" separated by
	// spaces, index 0 being the bucket at From (data-n).
	Counts string
	// Title sums the outcome up (the path's tooltip).
	Title string
}

// chartTick is a time label under the plot.
type chartTick struct {
	X     string
	Label string
}

// chartQuery is the page's selection as GET /throughput parameters.
func chartQuery(site, typ, by, window, bucket string) url.Values {
	v := url.Values{api.ParamWindow: {window}, api.ParamBucket: {bucket}}
	if site != "" {
		v.Set(api.ParamSite, site)
	}
	if typ != "" {
		v.Set(api.ParamType, typ)
	}
	if by != "" {
		v.Set(api.ParamBy, by)
	}
	return v
}

// charts reads the selection from the dashboard's query and counts both
// windows. sites are the sites the KPIs know, offered in the site selector.
func (s *Server) charts(ctx context.Context, v url.Values, sites []string) (chartsView, error) {
	cv := chartsView{Site: strings.TrimSpace(v.Get("site")), Type: strings.TrimSpace(v.Get("type")),
		By: strings.ToLower(strings.TrimSpace(v.Get("by"))), Days: defaultChartDays}
	if d := strings.TrimSpace(v.Get("days")); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > maxChartDays {
			return cv, invalid(fmt.Errorf("days: %q is not a number of days from 1 to %d", human.Clip(d, 40), maxChartDays))
		}
		cv.Days = n
	}
	if cv.By != "" && cv.Days > maxSplitDays {
		cv.Days, cv.DaysCut = maxSplitDays, true
	}
	cv.DayChoices = chartDayChoices(cv.Days, cv.By != "")
	now := s.cfg.Clock.Now()
	hq, err := api.ParseThroughput(chartQuery(cv.Site, cv.Type, cv.By, "1h", "1m"), now)
	if err != nil {
		return cv, invalid(err)
	}
	dq, err := api.ParseThroughput(chartQuery(cv.Site, cv.Type, cv.By, strconv.Itoa(cv.Days)+"d", "1h"), now)
	if err != nil {
		return cv, invalid(err)
	}
	hour, err := s.cfg.Outbox.Throughput(ctx, hq)
	if err != nil {
		return cv, err
	}
	days, err := s.chartCache.throughput(ctx, s.cfg.Outbox, dq, now)
	if err != nil {
		return cv, err
	}
	cv.HourFrom, cv.HourTo, cv.DaysFrom, cv.DaysTo = hq.From, hq.To, dq.From, dq.To

	cv.Sites = withSelected(sites, cv.Site)
	if types, err := s.cfg.Directory.Channels(ctx); err == nil {
		for _, c := range types {
			cv.Types = append(cv.Types, c.Type)
		}
	}
	cv.Types = withSelected(cv.Types, cv.Type)

	keys := map[string]bool{}
	for _, t := range []ports.Throughput{hour, days} {
		for _, sr := range t.Series {
			keys[sr.Key] = true
			if hq.By == ports.ThroughputBySite {
				cv.Sites = withSelected(cv.Sites, sr.Key)
			}
			if hq.By == ports.ThroughputByType {
				cv.Types = withSelected(cv.Types, sr.Key)
			}
		}
	}
	if hq.By == ports.ThroughputTotal {
		keys[""] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	plotH := chartPlotH
	if hq.By != ports.ThroughputTotal {
		plotH = smallPlotH
	}
	hourMax, daysMax := peak(hour), peak(days)
	for _, k := range sorted {
		id := ""
		if k != "" || hq.By != ports.ThroughputTotal {
			id = "-" + k
		}
		cv.Rows = append(cv.Rows, chartRow{Key: k,
			Hour: drawChart("hour"+id, hq, seriesOf(hour, k, hq), hourMax, plotH),
			Days: drawChart("days"+id, dq, seriesOf(days, k, dq), daysMax, plotH)})
	}
	return cv, nil
}

// withSelected returns list sorted with sel in it (when not empty), once.
func withSelected(list []string, sel string) []string {
	if sel != "" && !slices.Contains(list, sel) {
		list = append(list, sel)
	}
	slices.Sort(list)
	return slices.Compact(list)
}

// seriesOf returns t's series of key, or one of zeros.
func seriesOf(t ports.Throughput, key string, q ports.ThroughputQuery) ports.ThroughputSeries {
	for _, s := range t.Series {
		if s.Key == key {
			return s
		}
	}
	return ports.ThroughputSeries{Key: key, Buckets: make([]ports.ThroughputCounts, q.Buckets())}
}

// peak is the largest bucket total of any series of t: small multiples
// share their scale, so that sites compare at a glance.
func peak(t ports.Throughput) int64 {
	var m int64
	for _, s := range t.Series {
		for _, b := range s.Buckets {
			m = max(m, b.Delivered+b.Failed+b.Parked)
		}
	}
	return m
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(n int64) int64 {
	if n <= 1 {
		return 1
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// f formats a coordinate with one decimal, none when it is zero ("72",
// "72.5"): a week of bars per site is thousands of coordinates.
func f(x float64) string {
	s := strings.TrimSuffix(strconv.FormatFloat(x, 'f', 1, 64), ".0")
	if s == "-0" {
		return "0"
	}
	return s
}

// chartKinds are the outcomes a chart stacks, bottom first.
var chartKinds = []string{"delivered", "failed", "parked"}

// drawChart lays out one series as stacked bars: delivered at the bottom,
// then failed, then parked; each outcome's bars are one path.
func drawChart(id string, q ports.ThroughputQuery, s ports.ThroughputSeries, top int64, plotH int) chart {
	c := chart{ID: id, PlotLeft: chartLeft, PlotTop: chartTop, PlotRight: chartLeft + chartPlotW,
		PlotBottom: chartTop + plotH, Width: chartLeft + chartPlotW + chartRight, Height: chartTop + plotH + chartBottom,
		Total: s.Total, From: q.From.UTC().Format(time.RFC3339), BucketSeconds: int64(q.Bucket / time.Second)}
	c.YMax = niceCeil(top)
	c.YMid = c.YMax / 2
	c.MidY = f(float64(chartTop) + float64(plotH)*(1-float64(c.YMid)/float64(c.YMax)))
	n := len(s.Buckets)
	if n == 0 {
		return c
	}
	slot := float64(chartPlotW) / float64(n)
	w := max(slot*0.8, 0.5)
	scale := float64(plotH) / float64(c.YMax)
	var d, counts [3]strings.Builder
	var peak [3]int64
	var peakAt [3]time.Time
	// Each bar is a subpath "M x y h w v h h -w z", the ones after the
	// first moved relative to the one before ("m dx dy", from the tenths
	// the one before was written in), which keeps a week of bars short.
	var prevX, prevY [3]float64
	for i, b := range s.Buckets {
		start := q.From.Add(time.Duration(i) * q.Bucket)
		x := float64(chartLeft) + float64(i)*slot + (slot-w)/2
		y := float64(chartTop + plotH)
		for k, n := range []int64{b.Delivered, b.Failed, b.Parked} {
			if n == 0 {
				continue
			}
			h := float64(n) * scale
			y -= h
			rx, ry := tenths(x), tenths(y)
			if d[k].Len() == 0 {
				fmt.Fprintf(&d[k], "M%s %s", f(rx), f(ry))
			} else {
				fmt.Fprintf(&d[k], "m%s %s", f(rx-prevX[k]), f(ry-prevY[k]))
			}
			prevX[k], prevY[k] = rx, ry
			fmt.Fprintf(&d[k], "h%sv%sh-%sz", f(w), f(h), f(w))
			if counts[k].Len() > 0 {
				counts[k].WriteByte(' ')
			}
			fmt.Fprintf(&counts[k], "%d:%d", i, n)
			if n > peak[k] {
				peak[k], peakAt[k] = n, start
			}
		}
		// A label starting near the right edge would be cut off.
		if label, ok := tickLabel(start, q.Bucket); ok && float64(i)*slot < chartPlotW-28 {
			c.Ticks = append(c.Ticks, chartTick{X: f(float64(chartLeft) + float64(i)*slot), Label: label})
		}
	}
	totals := []int64{s.Total.Delivered, s.Total.Failed, s.Total.Parked}
	for k, kind := range chartKinds {
		if d[k].Len() == 0 {
			continue
		}
		c.Paths = append(c.Paths, chartPath{Kind: kind, D: d[k].String(), Counts: counts[k].String(),
			Title: fmt.Sprintf("%s %s, at most %s in one %s (%s UTC)", human.Thousands(totals[k]), kind,
				human.Thousands(peak[k]), bucketWord(q.Bucket), bucketLabel(peakAt[k], q.Bucket))})
	}
	return c
}

// tenths rounds x to a tenth, as f writes it.
func tenths(x float64) float64 { return math.Round(x*10) / 10 }

// bucketWord names a bucket's length in a tooltip.
func bucketWord(bucket time.Duration) string {
	switch bucket {
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return bucket.String()
}

// bucketLabel names a bucket by its start: "14:05" or "Mon 2 Jun 14:00".
func bucketLabel(t time.Time, bucket time.Duration) string {
	t = t.UTC()
	if bucket < time.Hour {
		return t.Format("15:04")
	}
	return t.Format("Mon 2 Jan 15:04")
}

// tickLabel is the time label of a bucket that starts a tick: every ten
// minutes on the minute chart, every midnight on the hourly one.
func tickLabel(t time.Time, bucket time.Duration) (string, bool) {
	t = t.UTC()
	switch {
	case bucket < time.Hour:
		return t.Format("15:04"), t.Minute()%10 == 0 && t.Second() == 0
	case bucket < 24*time.Hour:
		return t.Format("Mon 2"), t.Hour() == 0 && t.Minute() == 0
	default:
		return t.Format("2 Jan"), true
	}
}

// rate formats a per-minute rate: two significant digits below 10 ("0.07",
// "2.5"), whole numbers with thousands separators above.
func rate(r float64) string {
	switch {
	case r <= 0:
		return "0"
	case r < 10:
		return strconv.FormatFloat(r, 'g', 2, 64)
	default:
		return human.Thousands(int64(r + 0.5))
	}
}

// chartDayChoices are the days the daily chart offers, with cur among
// them; up to maxSplitDays for a split view.
func chartDayChoices(cur int, split bool) []int {
	days := []int{1, 2, 7, 14, 31}
	if split {
		days = slices.DeleteFunc(days, func(d int) bool { return d > maxSplitDays })
	}
	if !slices.Contains(days, cur) {
		days = append(days, cur)
		slices.Sort(days)
	}
	return days
}
