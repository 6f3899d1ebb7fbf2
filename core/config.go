package core

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// Config holds the outbox's options. The zero value of a field means "use the
// default" to New, which applies WithDefaults; Validate checks a
// configuration as it will run, each broken rule on its field. Each field
// names its default; dispatch is also woken by ingest, so DispatchInterval is
// only the fallback poll.
type Config struct {
	// NodeID names this central node in leases and logs. It must be unique
	// among the running nodes that share a store, and the same across the
	// node's restarts: at start Run releases every lease an earlier run
	// under this NodeID left, so that the rows a crashed run held are
	// delivered at once instead of after ClaimLease, and a second running
	// node under the same NodeID would lose its leases to it (repeated
	// deliveries). It must not hold "/" (see ports.LeaseOwner). Default: a
	// random id, which no restart reuses: its leases expire on their own.
	NodeID string
	// DispatchInterval is the fallback poll of the dispatcher. Default 10 s.
	DispatchInterval time.Duration
	// DispatchBatchSize is the most rows a batch delivers and records
	// together. A sweep's first claim takes one batch; while the last
	// claim to end came back full, a claim takes the rows of up to four
	// batches in one statement (at most 1,000 rows, but always at least one
	// batch), and they still go out batch by batch. Default 100.
	DispatchBatchSize int
	// DispatchConcurrency bounds deliveries in flight at once. Default 32.
	DispatchConcurrency int
	// DeliveryTimeout bounds one delivery attempt. Default 30 s.
	DeliveryTimeout time.Duration
	// ClaimLease is how long a claimed row stays leased to this node; after
	// it another node may claim the row. It must exceed DeliveryTimeout.
	// Default 5 min.
	ClaimLease time.Duration
	// StuckAgeThreshold: Pending or Retrying rows older than it are stuck
	// (display only). Default 10 min.
	StuckAgeThreshold time.Duration
	// TerminalRetention is how long terminal rows are kept. Default 365 days.
	TerminalRetention time.Duration
	// PurgeInterval is the cadence of the purge. Default 24 h.
	PurgeInterval time.Duration
	// DeliveredKpiWindow is the trailing window of the "delivered" KPI.
	// Default 1 min.
	DeliveredKpiWindow time.Duration
	// MaxBatch caps the submissions of one Submit. Default 1000.
	MaxBatch int
	// MaxSubjectBytes and MaxBodyBytes cap a submission's subject and body.
	// Defaults 255 and 65536.
	MaxSubjectBytes int
	MaxBodyBytes    int
	// ReconcileInterval is how often central asks each site's leader for
	// the tracking rows changed since its cursor, besides when the site's
	// leader first calls this node or changes. Default 5 min.
	ReconcileInterval time.Duration
	// SiteStaleAfter is how long after its nodes' newest report a site
	// turns stale (Sites, SiteStateAt), and after which a leader's Sync
	// counts as the site coming back (central then asks for its change
	// feed). It must exceed the sites' report interval: three of them by
	// default. A leader's long poll is held at most two thirds of it, so
	// that a leader alone keeps its site connected. Default
	// ports.SiteStaleAfter (45 s).
	SiteStaleAfter time.Duration
	// SiteDisconnectedAfter is how long after its nodes' newest report a
	// site turns disconnected; it must exceed SiteStaleAfter. Default
	// ports.SiteDisconnectedAfter (3 min).
	SiteDisconnectedAfter time.Duration
}

// Defaults of Config.
const (
	DefaultDispatchInterval    = 10 * time.Second
	DefaultDispatchBatchSize   = 100
	DefaultDispatchConcurrency = 32
	DefaultDeliveryTimeout     = 30 * time.Second
	DefaultClaimLease          = 5 * time.Minute
	DefaultStuckAgeThreshold   = 10 * time.Minute
	DefaultTerminalRetention   = 365 * 24 * time.Hour
	DefaultPurgeInterval       = 24 * time.Hour
	DefaultDeliveredKpiWindow  = time.Minute
	DefaultMaxBatch            = 1000
	DefaultMaxSubjectBytes     = 255
	DefaultMaxBodyBytes        = 64 << 10
	DefaultReconcileInterval   = 5 * time.Minute
)

// minSiteStaleAfter is the least SiteStaleAfter Validate accepts: a
// leader with nothing to do Syncs at most once a second (minSyncGap).
const minSiteStaleAfter = 2 * minSyncGap

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(i *int, v int) {
		if *i == 0 {
			*i = v
		}
	}
	def(&c.DispatchInterval, DefaultDispatchInterval)
	defInt(&c.DispatchBatchSize, DefaultDispatchBatchSize)
	defInt(&c.DispatchConcurrency, DefaultDispatchConcurrency)
	def(&c.DeliveryTimeout, DefaultDeliveryTimeout)
	def(&c.ClaimLease, DefaultClaimLease)
	def(&c.StuckAgeThreshold, DefaultStuckAgeThreshold)
	def(&c.TerminalRetention, DefaultTerminalRetention)
	def(&c.PurgeInterval, DefaultPurgeInterval)
	def(&c.DeliveredKpiWindow, DefaultDeliveredKpiWindow)
	defInt(&c.MaxBatch, DefaultMaxBatch)
	defInt(&c.MaxSubjectBytes, DefaultMaxSubjectBytes)
	defInt(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	def(&c.ReconcileInterval, DefaultReconcileInterval)
	def(&c.SiteStaleAfter, ports.SiteStaleAfter)
	def(&c.SiteDisconnectedAfter, ports.SiteDisconnectedAfter)
	return c
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go name of its field. It checks c as given, where a zero is no
// default but a value: call it on c.WithDefaults() to validate what will
// run. A configuration loader maps the field names to its own keys.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &ports.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	// A node id names the leases of every run of one central: letters and
	// a few marks only, and never the "/" that separates it from the run
	// (see ports.LeaseOwner). Nothing here can check the rule that matters
	// most, that no two running centrals share it.
	if c.NodeID != "" {
		if len(c.NodeID) > 64 {
			add("NodeID", "longer than 64 characters (%d)", len(c.NodeID))
		}
		if i := strings.IndexFunc(c.NodeID, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:", r))
		}); i >= 0 {
			_, n := utf8.DecodeRuneInString(c.NodeID[i:])
			add("NodeID", "%q holds %q (use letters, digits, '.', '_', '-' and ':')", c.NodeID, c.NodeID[i:i+n])
		}
	}
	positive := func(field string, d time.Duration) {
		if d <= 0 {
			add(field, "must be positive, got %s (leave it out for the default)", d)
		}
	}
	positiveInt := func(field string, v int) {
		if v <= 0 {
			add(field, "must be positive, got %d (leave it out for the default)", v)
		}
	}
	positive("DispatchInterval", c.DispatchInterval)
	positiveInt("DispatchBatchSize", c.DispatchBatchSize)
	if c.DispatchBatchSize > 10000 {
		add("DispatchBatchSize", "must be at most 10000, got %d", c.DispatchBatchSize)
	}
	positiveInt("DispatchConcurrency", c.DispatchConcurrency)
	positive("DeliveryTimeout", c.DeliveryTimeout)
	positive("ClaimLease", c.ClaimLease)
	if c.ClaimLease > 0 && c.DeliveryTimeout > 0 && c.ClaimLease <= c.DeliveryTimeout {
		add("ClaimLease", "%s must exceed DeliveryTimeout (%s), or a slow delivery could be claimed twice", c.ClaimLease, c.DeliveryTimeout)
	}
	positive("StuckAgeThreshold", c.StuckAgeThreshold)
	positive("TerminalRetention", c.TerminalRetention)
	positive("PurgeInterval", c.PurgeInterval)
	positive("DeliveredKpiWindow", c.DeliveredKpiWindow)
	positiveInt("MaxBatch", c.MaxBatch)
	positiveInt("MaxSubjectBytes", c.MaxSubjectBytes)
	positiveInt("MaxBodyBytes", c.MaxBodyBytes)
	positive("ReconcileInterval", c.ReconcileInterval)
	if c.SiteStaleAfter < minSiteStaleAfter {
		add("SiteStaleAfter", "must be at least %s (and above the sites' report interval), got %s", minSiteStaleAfter, c.SiteStaleAfter)
	}
	if c.SiteDisconnectedAfter <= c.SiteStaleAfter {
		add("SiteDisconnectedAfter", "%s must exceed SiteStaleAfter (%s): a site turns stale before it is disconnected",
			c.SiteDisconnectedAfter, c.SiteStaleAfter)
	}
	return errors.Join(errs...)
}
