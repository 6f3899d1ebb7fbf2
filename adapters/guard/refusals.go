// Package guard holds what every network entrance of the outbox (the site
// link, the site API, the operator surface) uses to bound what an outsider
// can make it spend before it knows who is calling: a refusal log that writes
// at most one line per caller per interval and counts every refusal in a
// metric, a per-caller rate limiter with a bounded memory, a listener that
// caps connections per client address, and the gRPC server options that
// bound handshakes, idle connections, streams and message sizes.
//
// Every structure here that is keyed by a caller holds a bounded number of
// keys, so that a flood of distinct callers (addresses, names) costs a fixed
// amount of memory.
package guard

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// DefaultLogInterval is how often a Refusals writes a line for one caller
// when it is not told otherwise.
const DefaultLogInterval = time.Minute

// maxLogKeys bounds the callers a Refusals remembers; past it, the
// refusals of new callers share one line under the key "(other callers)".
const maxLogKeys = 4096

// otherCallers is the key of the callers beyond maxLogKeys.
const otherCallers = "(other callers)"

// Refusals logs and counts the refusals of one entrance. A refusal is
// counted at once in the metric outbox_refusals_total{entrance, reason};
// it is logged only if no line was written for the same caller within the
// interval, and then the line says how many refusals of that caller were not
// logged since the last one (suppressed). So one caller can write at most
// one line per interval, however fast it tries.
//
// Reasons must come from the code (a fixed set of texts), never from the
// caller: they are metric label values. Caller keys are usually client
// addresses without the port ([Host]). A Refusals is safe for concurrent
// use; its zero value is not usable: call NewRefusals.
type Refusals struct {
	entrance string
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time
	counter  *prometheus.CounterVec

	mu      sync.Mutex
	callers map[string]*refusalState
	swept   time.Time // when forgetQuiet last ran
}

// refusalState is what a Refusals remembers of one caller.
type refusalState struct {
	logged     time.Time // when the last line was written
	suppressed int       // refusals since then that wrote no line
}

var _ prometheus.Collector = (*Refusals)(nil)

// NewRefusals returns the refusal log of the entrance named entrance (a
// fixed word: "site_link", "site_api", "http"). Lines go to logger at WARN
// (nil discards them); interval 0 means DefaultLogInterval.
func NewRefusals(entrance string, logger *slog.Logger, interval time.Duration) *Refusals {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if interval <= 0 {
		interval = DefaultLogInterval
	}
	return &Refusals{
		entrance: entrance,
		log:      logger,
		interval: interval,
		now:      time.Now,
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_refusals_total",
			Help:        "Requests or connections an entrance refused, by reason (unauthenticated, over a limit, malformed).",
			ConstLabels: prometheus.Labels{"entrance": entrance},
		}, []string{"reason"}),
		callers: make(map[string]*refusalState),
	}
}

// Refuse records one refusal of caller for reason. attrs are added to the
// log line when one is written; they must hold no secret and nothing the
// caller chose without a bound (clip it first).
func (r *Refusals) Refuse(caller, reason string, attrs ...any) {
	r.counter.WithLabelValues(reason).Inc()
	now := r.now()
	r.mu.Lock()
	st, ok := r.callers[caller]
	if !ok {
		if len(r.callers) >= maxLogKeys {
			r.forgetQuiet(now)
		}
		if len(r.callers) >= maxLogKeys {
			caller = otherCallers
			st = r.callers[caller]
		}
		if st == nil {
			st = &refusalState{}
			r.callers[caller] = st
		}
	}
	if !st.logged.IsZero() && now.Sub(st.logged) < r.interval {
		st.suppressed++
		r.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.logged, st.suppressed = now, 0
	r.mu.Unlock()

	args := append([]any{"entrance", r.entrance, "caller", caller, "reason", reason}, attrs...)
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.log.Warn(r.entrance+": refused", args...)
}

// forgetQuiet drops the callers whose last line is older than the interval
// and that have nothing suppressed. It runs at most once per interval, so a
// full table costs no scan per refusal; r.mu is held.
func (r *Refusals) forgetQuiet(now time.Time) {
	if !r.swept.IsZero() && now.Sub(r.swept) < r.interval {
		return
	}
	r.swept = now
	for k, st := range r.callers {
		if now.Sub(st.logged) >= r.interval && st.suppressed == 0 {
			delete(r.callers, k)
		}
	}
}

// Describe implements prometheus.Collector.
func (r *Refusals) Describe(ch chan<- *prometheus.Desc) { r.counter.Describe(ch) }

// Collect implements prometheus.Collector.
func (r *Refusals) Collect(ch chan<- prometheus.Metric) { r.counter.Collect(ch) }

// Count returns how many refusals for reason were counted so far.
func (r *Refusals) Count(reason string) int {
	var m dto.Metric
	if err := r.counter.WithLabelValues(reason).Write(&m); err != nil {
		return 0
	}
	return int(m.GetCounter().GetValue())
}

// Host returns the host part of a network address (an IP without its port),
// the usual caller key; addr itself when it has no port.
func Host(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}
