package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/ports"
)

// CentralSources are what the central collector reads at each scrape.
type CentralSources struct {
	// KPIs returns the delivery KPIs (core.Service.KPIs). Required.
	KPIs func(context.Context) (ports.KPIReport, error)
	// Window is the trailing window of the delivered count
	// (core.Config.DeliveredKpiWindow), written in the metric's help
	// text. Zero leaves it out of the help; outbox_delivered_recent_window_seconds
	// always exports the window the KPIs were computed with.
	Window time.Duration
	// Plugins returns the status of every channel plugin, one entry per
	// type; nil when central runs no plugin host. It must not block.
	Plugins func() []ports.PluginStatus
	// Sites returns central's view of the sites: their state, last
	// contact, leader and the health (backlogs) their nodes reported. The
	// collector reads no mirror count (SiteView.Calls), so the source is
	// core.Service.SiteStates, which does not count the mirror's rows at
	// each refresh. nil when central keeps no mirror of the sites.
	Sites func(context.Context) ([]ports.SiteView, error)
	// CacheFor is how long one read of the KPIs (and of the sites) serves
	// every scrape. A
	// read costs the database several queries and /metrics needs no login,
	// so scrapes within the window, and scrapes at the same moment, share
	// one read. 0 means DefaultKPICacheFor; a negative value reads again at
	// every scrape (scrapes at the same moment still share one read).
	CacheFor time.Duration
}

// DefaultKPICacheFor is how long one read of the KPIs serves /metrics when
// CentralSources.CacheFor is 0.
const DefaultKPICacheFor = 5 * time.Second

// CentralCollector is a prometheus.Collector of central's delivery KPIs,
// its channel plugins' health and, with CentralSources.Sites, the sites'.
//
// The KPIs are exported twice: globally (outbox_queue_depth, …) and per
// source site with a site label under the outbox_central_site_ prefix
// (outbox_central_site_queue_depth{site="plant-1"}, …): central's own
// queue of each site's notifications. The per-site metrics are separate
// names rather than the global ones with a label, because the global
// oldest age is a maximum, not a sum, so aggregating one metric over its
// label would mislead.
//
// What the sites report of themselves is exported under the outbox_site_
// prefix, as a site node's own metrics are ([SiteCollector]):
// outbox_site_last_contact_seconds{site}, outbox_site_state{site,state},
// outbox_site_reported_backlog{site,kind} and
// outbox_site_reported_parked{site,kind}: the counts the site's leader
// (or, when none leads, its most recently reporting node) last reported.
// They are named apart from a node's own outbox_site_backlog{site,node}
// and outbox_site_operations_backlog and _parked{site,node,kind}, which
// the node exports of itself.
type CentralCollector struct {
	src   CentralSources
	log   *slog.Logger
	kpis  *readCache[ports.KPIReport]
	sites *sitesMetrics // nil without CentralSources.Sites

	global, bySite                                   kpiDescs
	window, up, pluginUp, pluginRestarts, pluginHung *prometheus.Desc
}

// kpiDescs are the descriptors of one set of KPIs.
type kpiDescs struct {
	queueDepth, stuck, parked, delivered, oldestAge *prometheus.Desc
}

func (k kpiDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{k.queueDepth, k.stuck, k.parked, k.delivered, k.oldestAge}
}

var _ prometheus.Collector = (*CentralCollector)(nil)

// NewCentralCollector returns a collector reading src at each scrape, each
// read bounded by the scrape timeout. It refuses sources without KPIs. A
// failed read is logged to logger (nil discards).
func NewCentralCollector(src CentralSources, logger *slog.Logger) (*CentralCollector, error) {
	if src.KPIs == nil {
		return nil, errors.New("metrics: CentralSources.KPIs is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recent := "in the trailing KPI window (outbox_delivered_recent_window_seconds)"
	if src.Window > 0 {
		recent = "in the last " + src.Window.String()
	}
	kpis := func(prefix, scope string, labels ...string) kpiDescs {
		d := func(name, help string) *prometheus.Desc {
			return prometheus.NewDesc(prefix+name, help+scope, labels, nil)
		}
		return kpiDescs{
			queueDepth: d("queue_depth", "Notifications waiting for delivery (Pending and Retrying)"),
			stuck:      d("stuck", "Notifications not yet terminal and older than the stuck threshold"),
			parked:     d("parked", "Notifications Parked, waiting for an operator"),
			delivered:  d("delivered_recent", "Notifications delivered "+recent),
			oldestAge:  d("oldest_pending_age_seconds", "Age of the oldest Pending or Retrying notification; 0 when none"),
		}
	}
	cacheFor := src.CacheFor
	if cacheFor == 0 {
		cacheFor = DefaultKPICacheFor
	}
	var sites *sitesMetrics
	if src.Sites != nil {
		sites = newSitesMetrics(src.Sites, cacheFor)
	}
	return &CentralCollector{
		src:    src,
		sites:  sites,
		log:    logger,
		kpis:   &readCache[ports.KPIReport]{read: src.KPIs, ttl: cacheFor, now: time.Now},
		global: kpis("outbox_", "."),
		bySite: kpis("outbox_central_site_", ", of one source site.", "site"),
		window: prometheus.NewDesc("outbox_delivered_recent_window_seconds",
			"The trailing window of outbox_delivered_recent.", nil, nil),
		up: prometheus.NewDesc("outbox_kpi_up", "1 when the delivery KPIs could be read.", nil, nil),
		pluginUp: prometheus.NewDesc("outbox_plugin_up",
			"1 while the channel plugin's process runs, 0 while it is down.", []string{"plugin"}, nil),
		pluginRestarts: prometheus.NewDesc("outbox_plugin_restarts_total",
			"Restarts of the channel plugin's process after a crash since central started, those after it stopped answering included.", []string{"plugin"}, nil),
		pluginHung: prometheus.NewDesc("outbox_plugin_stopped_answering_total",
			"Processes of the channel plugin that stopped answering central's pings and were killed and restarted, since central started.", []string{"plugin"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *CentralCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(append(c.global.all(), c.bySite.all()...), c.window, c.up, c.pluginUp, c.pluginRestarts, c.pluginHung) {
		ch <- d
	}
	if c.sites != nil {
		c.sites.describe(ch)
	}
}

// Collect implements prometheus.Collector. A failed KPI read exports
// outbox_kpi_up 0 and no KPIs, a failed read of the sites outbox_sites_up
// 0 and no site; the plugin metrics are exported either way.
func (c *CentralCollector) Collect(ch chan<- prometheus.Metric) {
	if c.sites != nil {
		if err := c.sites.collect(ch); err != nil {
			c.log.Warn("metrics: read the sites", "err", err)
		}
	}
	if c.src.Plugins != nil {
		for _, p := range c.src.Plugins() {
			up := 0.0
			if p.Running {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.pluginUp, prometheus.GaugeValue, up, p.Type)
			ch <- prometheus.MustNewConstMetric(c.pluginRestarts, prometheus.CounterValue, float64(p.Restarts), p.Type)
			ch <- prometheus.MustNewConstMetric(c.pluginHung, prometheus.CounterValue, float64(p.StoppedAnswering), p.Type)
		}
	}

	r, err := c.kpis.get()
	if err != nil {
		c.log.Warn("metrics: read delivery KPIs", "err", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, r.Window.Seconds())
	c.global.collect(ch, r.Global)
	for _, s := range r.Sites {
		c.bySite.collect(ch, s.KPI, s.Site)
	}
}

func (k kpiDescs) collect(ch chan<- prometheus.Metric, v ports.KPI, labels ...string) {
	gauge := func(d *prometheus.Desc, x float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, labels...)
	}
	gauge(k.queueDepth, float64(v.QueueDepth))
	gauge(k.stuck, float64(v.Stuck))
	gauge(k.parked, float64(v.Parked))
	gauge(k.delivered, float64(v.Delivered))
	gauge(k.oldestAge, max(0, v.OldestPendingAge.Seconds()))
}

// attemptBuckets are the upper bounds, in seconds, of the attempt duration
// histogram: from 1 ms (a local capture) to 60 s (the longest sensible
// delivery timeout).
var attemptBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// DeliveryMetrics counts central's delivery attempts, their durations and
// the targets each attempt went to, per channel type. It implements ports.DeliveryObserver (give it to
// core.Deps.Observer) and prometheus.Collector (give it to Handler). The
// outcome label is the outcome in lower case: success, transient or
// permanent.
type DeliveryMetrics struct {
	attempts *prometheus.CounterVec
	targets  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var (
	_ ports.DeliveryObserver = (*DeliveryMetrics)(nil)
	_ prometheus.Collector   = (*DeliveryMetrics)(nil)
)

// NewDeliveryMetrics returns empty delivery metrics. The series of each of
// channels (channel types) are created at zero, so that rates and
// increases see their first attempt; a channel not named appears at its
// first attempt.
func NewDeliveryMetrics(channels ...string) *DeliveryMetrics {
	m := &DeliveryMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_delivery_attempts_total",
			Help: "Delivery attempts made through a channel, by outcome (success, transient, permanent).",
		}, []string{"channel", "outcome"}),
		targets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_target_attempts_total",
			Help: "Targets delivery attempts went to, by the outcome for each target (success, transient, permanent).",
		}, []string{"channel", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_delivery_attempt_duration_seconds",
			Help:    "Time a channel took for one delivery attempt, whatever its outcome.",
			Buckets: attemptBuckets,
		}, []string{"channel"}),
	}
	for _, c := range channels {
		for _, o := range []ports.Outcome{ports.OutcomeSuccess, ports.OutcomeTransient, ports.OutcomePermanent} {
			m.attempts.WithLabelValues(c, outcomeLabel(o))
			m.targets.WithLabelValues(c, outcomeLabel(o))
		}
		m.duration.WithLabelValues(c)
	}
	return m
}

// Attempted implements ports.DeliveryObserver. It never blocks.
func (m *DeliveryMetrics) Attempted(channel string, outcome ports.Outcome, d time.Duration, targets []ports.Outcome) {
	m.attempts.WithLabelValues(channel, outcomeLabel(outcome)).Inc()
	m.duration.WithLabelValues(channel).Observe(d.Seconds())
	for _, o := range targets {
		m.targets.WithLabelValues(channel, outcomeLabel(o)).Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *DeliveryMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.attempts.Describe(ch)
	m.targets.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *DeliveryMetrics) Collect(ch chan<- prometheus.Metric) {
	m.attempts.Collect(ch)
	m.targets.Collect(ch)
	m.duration.Collect(ch)
}

func outcomeLabel(o ports.Outcome) string { return strings.ToLower(string(o)) }

// CentralHandler returns an http.Handler serving central's /metrics: the
// KPIs and plugins of src, the delivery metrics (which must be the
// DeliveryMetrics given to core.Deps.Observer), the extra collectors (the
// entrances' refusal counts) and, as for a site, the Go runtime and process
// collectors.
func CentralHandler(src CentralSources, delivery *DeliveryMetrics, logger *slog.Logger, extra ...prometheus.Collector) (http.Handler, error) {
	c, err := NewCentralCollector(src, logger)
	if err != nil {
		return nil, err
	}
	if delivery == nil {
		return nil, errors.New("metrics: CentralHandler needs the DeliveryMetrics")
	}
	h, err := Handler(append([]prometheus.Collector{c, delivery}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("metrics: register central collectors: %w", err)
	}
	return h, nil
}

// readCache shares reads of a source (the KPIs, the sites) among scrapes:
// a read serves every scrape for ttl after it ended, and scrapes that come
// while a read is in flight wait for it instead of starting their own
// (single flight). Each read is bounded by scrapeTimeout.
type readCache[T any] struct {
	read func(context.Context) (T, error)
	ttl  time.Duration
	now  func() time.Time

	mu     sync.Mutex
	last   *cachedRead[T] // the last read that ended
	flight *cachedRead[T] // the read in flight, nil when none
	joined int            // scrapes that waited for a read in flight (for tests)
}

// cachedRead is one read of a source; done is closed when it ended.
type cachedRead[T any] struct {
	done chan struct{}
	at   time.Time
	r    T
	err  error
}

// get returns what a fresh enough read, the read in flight, or a new read
// returned.
func (c *readCache[T]) get() (T, error) {
	c.mu.Lock()
	if l := c.last; l != nil && c.ttl > 0 && c.now().Sub(l.at) < c.ttl {
		c.mu.Unlock()
		return l.r, l.err
	}
	if f := c.flight; f != nil {
		c.joined++
		c.mu.Unlock()
		<-f.done
		return f.r, f.err
	}
	f := &cachedRead[T]{done: make(chan struct{}), err: errors.New("metrics: the read panicked")}
	c.flight = f
	c.mu.Unlock()

	defer func() {
		c.mu.Lock()
		f.at = c.now()
		c.last, c.flight = f, nil
		c.mu.Unlock()
		close(f.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	f.r, f.err = c.read(ctx)
	return f.r, f.err
}
