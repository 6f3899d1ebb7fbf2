package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// SiteConfig holds a site node's options. The zero value of a field means
// "use the default" to NewSite, which applies WithDefaults; Validate checks a
// configuration as it will run, each broken rule on its field.
type SiteConfig struct {
	// Site is the site id stamped on every notification as its source site;
	// required. Central accepts from a site only rows stamped with its id.
	Site string
	// MaxSubjectBytes and MaxBodyBytes cap a Send's subject and body.
	// Defaults 255 and 65536, as central's.
	MaxSubjectBytes int
	MaxBodyBytes    int
	// ForwardBatch is the most notifications sent to central in one Submit.
	// Default 500; at most central's MaxBatch (1000 by default).
	ForwardBatch int
	// ForwardBatchBytes caps the subjects and bodies of one Submit, so that
	// a batch of large bodies stays well under the link's message limit.
	// Default 4 MiB.
	ForwardBatchBytes int
	// RetryInterval is the fixed wait before forwarding again after central
	// could not be reached or refused notifications, and the fallback
	// poll of an idle forwarder. Default 5 s.
	RetryInterval time.Duration
	// CallTimeout bounds one call to central. Default 30 s.
	CallTimeout time.Duration
	// MaxStatusIDs caps the ids of one Status call, and of one Tracking
	// call. Default 1000.
	MaxStatusIDs int

	// The cached operations (calls to external systems, database writes);
	// they matter only when SiteDeps has Ops and Gateway.

	// MaxOpPayloadBytes caps a cached call's parameters, or a cached
	// write's SQL and arguments together. Default 64 KiB.
	MaxOpPayloadBytes int
	// OpConcurrency is how many buffered operations the redelivery loop
	// attempts at once. Default 16.
	OpConcurrency int
	// OpBatch is the most due operations the redelivery loop takes from the
	// store at a time, and the most terminal rows one purge step removes.
	// Default 100.
	OpBatch int
	// OpRetention is how long a terminal operation (Delivered, Failed,
	// Discarded) stays in the tracking table before the purge removes it.
	// Default 7 days.
	OpRetention time.Duration
	// OpPurgeInterval is how often the purge of terminal operations runs.
	// Default 1 h.
	OpPurgeInterval time.Duration
	// TelemetryQueue bounds the rows queued for telemetry to central; when
	// it is full the oldest is dropped (and counted): reconciliation heals
	// it. Default 10000.
	TelemetryQueue int
	// ReportInterval is how often the node reports its health to central
	// (Sync): a follower calls every ReportInterval, the leader's long
	// poll asks central to wait up to it. Central holds the poll at most
	// ports.MaxSyncWait, and turns a site stale after its own
	// SiteStaleAfter, which must exceed this interval (three of them by
	// default). At least MinReportInterval, at most ports.MaxSyncWait.
	// Default ports.SiteReportInterval (15 s).
	ReportInterval time.Duration
}

// Defaults of SiteConfig.
const (
	DefaultForwardBatch      = 500
	DefaultForwardBatchBytes = 4 << 20
	DefaultRetryInterval     = 5 * time.Second
	DefaultCallTimeout       = 30 * time.Second
	DefaultMaxStatusIDs      = 1000
	DefaultMaxOpPayloadBytes = 64 << 10
	DefaultOpConcurrency     = 16
	DefaultOpBatch           = 100
	DefaultOpRetention       = 7 * 24 * time.Hour
	DefaultOpPurgeInterval   = time.Hour
	DefaultTelemetryQueue    = 10000
)

// MinReportInterval is the least SiteConfig.ReportInterval: a report is a
// call to central and a write of its store.
const MinReportInterval = 100 * time.Millisecond

// WithDefaults returns c with every zero field set to its default.
func (c SiteConfig) WithDefaults() SiteConfig {
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&c.MaxSubjectBytes, DefaultMaxSubjectBytes)
	setInt(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	setInt(&c.ForwardBatch, DefaultForwardBatch)
	setInt(&c.ForwardBatchBytes, DefaultForwardBatchBytes)
	setInt(&c.MaxStatusIDs, DefaultMaxStatusIDs)
	setInt(&c.MaxOpPayloadBytes, DefaultMaxOpPayloadBytes)
	setInt(&c.OpConcurrency, DefaultOpConcurrency)
	setInt(&c.OpBatch, DefaultOpBatch)
	setInt(&c.TelemetryQueue, DefaultTelemetryQueue)
	setDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setDur(&c.RetryInterval, DefaultRetryInterval)
	setDur(&c.CallTimeout, DefaultCallTimeout)
	setDur(&c.OpRetention, DefaultOpRetention)
	setDur(&c.OpPurgeInterval, DefaultOpPurgeInterval)
	setDur(&c.ReportInterval, ports.SiteReportInterval)
	return c
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go name of its field. It checks c as given, where a zero is no
// default but a value: call it on c.WithDefaults() to validate what will
// run. A configuration loader maps the field names to its own keys.
func (c SiteConfig) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &ports.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	// The site id is stamped on every notification and names the site at
	// central, in its certificates and its logs: a short plain name.
	if strings.TrimSpace(c.Site) == "" {
		add("Site", "required")
	} else if i := strings.IndexFunc(c.Site, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r))
	}); i >= 0 || len(c.Site) > 64 {
		add("Site", "%q: use at most 64 letters, digits, '.', '_' and '-'", c.Site)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"ForwardBatch", c.ForwardBatch}, {"ForwardBatchBytes", c.ForwardBatchBytes}, {"MaxSubjectBytes", c.MaxSubjectBytes},
		{"MaxBodyBytes", c.MaxBodyBytes}, {"MaxStatusIDs", c.MaxStatusIDs}, {"MaxOpPayloadBytes", c.MaxOpPayloadBytes},
		{"OpConcurrency", c.OpConcurrency}, {"OpBatch", c.OpBatch}, {"TelemetryQueue", c.TelemetryQueue}} {
		if f.v <= 0 {
			add(f.name, "must be positive, got %d (leave it out for the default)", f.v)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"RetryInterval", c.RetryInterval}, {"CallTimeout", c.CallTimeout}, {"OpRetention", c.OpRetention},
		{"OpPurgeInterval", c.OpPurgeInterval}} {
		if f.d <= 0 {
			add(f.name, "must be positive, got %s (leave it out for the default)", f.d)
		}
	}
	if c.ReportInterval < MinReportInterval || c.ReportInterval > ports.MaxSyncWait {
		add("ReportInterval", "must be between %s and %s (the longest wait central holds a Sync), got %s",
			MinReportInterval, ports.MaxSyncWait, c.ReportInterval)
	}
	return errors.Join(errs...)
}

// SiteDeps are the driven ports a Site needs.
type SiteDeps struct {
	// Buffer is the replicated buffer.
	Buffer ports.Buffer
	// Central is the link to central.
	Central ports.Central
	// Ops is the replicated store of cached operations and Gateway the
	// delivery to their targets: both or neither. Without them the site
	// defines no external systems and no database connections: a cached
	// call or write is refused as naming an unknown target (ErrInvalid),
	// Tracking and ListOperations find nothing, and the redelivery and purge
	// loops only wait for their end.
	Ops     ports.OpStore
	Gateway ports.OpGateway
	// Clock defaults to ports.SystemClock.
	Clock ports.Clock
	// Logger defaults to one that discards.
	Logger *slog.Logger
}

// Site is a site node's domain: it implements the driving ports ports.Site
// (Send, Status, Health) and ports.Operations (the cached calls and writes)
// and, in Forward, Redeliver and PurgeOperations, the loops the leader
// runs, and in Sync the link to central every node runs. Which node
// leads is not its concern: the buffer refuses writes off the leader, and
// the wiring runs Forward only while the node leads.
type Site struct {
	cfg     SiteConfig
	buffer  ports.Buffer
	central ports.Central
	clock   ports.Clock
	log     *slog.Logger

	ops     ports.OpStore
	gateway ports.OpGateway

	// wake holds at most one pending wake-up of the forwarder, opWake of
	// the redelivery loop.
	wake   chan struct{}
	opWake chan struct{}

	// inflight holds the ids whose first attempt is under way on this
	// node; a call with the same id waits for the channel to close.
	opMu     sync.Mutex
	inflight map[string]chan struct{}

	// sends coalesces concurrent Sends into one Append.
	sends *sendBatcher

	// link is the telemetry queue and the Sync loop's state.
	link *link

	mu          sync.Mutex
	lastContact time.Time
	lastErr     string
}

var (
	_ ports.Site       = (*Site)(nil)
	_ ports.Operations = (*Site)(nil)
)

// NewSite builds a Site. cfg's zero fields take their defaults; an invalid cfg
// or a missing dependency is an error.
func NewSite(cfg SiteConfig, deps SiteDeps) (*Site, error) {
	cfg = cfg.WithDefaults()
	errs := []error{cfg.Validate()}
	if deps.Buffer == nil {
		errs = append(errs, errors.New("core: SiteDeps.Buffer is nil"))
	}
	if deps.Central == nil {
		errs = append(errs, errors.New("core: SiteDeps.Central is nil"))
	}
	if (deps.Ops == nil) != (deps.Gateway == nil) {
		errs = append(errs, errors.New("core: SiteDeps.Ops and SiteDeps.Gateway go together: set both or neither"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = ports.SystemClock{}
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Site{
		cfg:      cfg,
		buffer:   deps.Buffer,
		central:  deps.Central,
		clock:    deps.Clock,
		log:      deps.Logger,
		ops:      deps.Ops,
		gateway:  deps.Gateway,
		wake:     make(chan struct{}, 1),
		opWake:   make(chan struct{}, 1),
		inflight: make(map[string]chan struct{}),
		link:     newLink(),
		sends:    newSendBatcher(deps.Buffer),
	}, nil
}

// Config returns the configuration in force, defaults applied.
func (s *Site) Config() SiteConfig { return s.cfg }

// Send implements ports.Site. ctx must carry a deadline: a script that waits
// forever for a site in trouble is worse than one told to try later.
func (s *Site) Send(ctx context.Context, req ports.SendRequest) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		return "", fmt.Errorf("Send needs a context with a deadline: %w", ports.ErrInvalid)
	}
	id, err := s.sendID(req.ID)
	if err != nil {
		return "", err
	}
	var errs fieldErrors
	errs.text("list", req.List, maxNameBytes, true)
	errs.content(req.Subject, req.Body, s.cfg.MaxSubjectBytes, s.cfg.MaxBodyBytes)
	errs.provenance(req.SourceInstance, req.SourceScript, req.ExecutionID, req.ParentExecutionID)
	if err := errs.err(); err != nil {
		return "", fmt.Errorf("%s: %w", err, ports.ErrInvalid)
	}
	sub := ports.Submission{
		ID:                id,
		List:              req.List,
		Subject:           req.Subject,
		Body:              req.Body,
		SourceSite:        s.cfg.Site,
		SourceInstance:    req.SourceInstance,
		SourceScript:      req.SourceScript,
		ExecutionID:       req.ExecutionID,
		ParentExecutionID: req.ParentExecutionID,
		SiteEnqueuedAt:    s.clock.Now().UTC(),
	}
	// Concurrent Sends go in one Append (see sendBatcher); each gets its
	// own outcome.
	if err := s.sends.append(ctx, sub); err != nil {
		return "", fmt.Errorf("buffer notification %s: %w", id, err)
	}
	s.Wake()
	return id, nil
}

// sendID returns the caller's id in canonical form, or a new time-ordered
// UUIDv7 (which keeps the buffer's and central's indexes append-mostly).
func (s *Site) sendID(id string) (string, error) {
	return newID(id, "notification")
}

// newID returns id in canonical form or, when id is empty, a new UUIDv7
// for a what.
func newID(id, what string) (string, error) {
	if id != "" {
		return parseID(id)
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("generate a %s id: %w", what, err)
	}
	return u.String(), nil
}

// Status implements ports.Site: the buffer answers for what it holds,
// central for the rest. When central cannot be reached for ids the buffer
// does not hold, Status fails with an error wrapping ErrUnavailable rather
// than guess.
func (s *Site) Status(ctx context.Context, ids []string) (map[string]ports.Status, error) {
	canon, err := s.canonIDs(ids)
	if err != nil {
		return nil, err
	}
	buffered, err := s.buffer.Contains(ctx, canon)
	if err != nil {
		return nil, fmt.Errorf("look up %d ids in the buffer: %w", len(canon), err)
	}
	out := make(map[string]ports.Status, len(ids))
	var ask []string
	for i, id := range canon {
		if buffered[id] {
			out[ids[i]] = ports.StatusForwarding
		} else {
			ask = append(ask, id)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	central, err := s.central.Status(cctx, ports.StatusRequest{Site: s.cfg.Site, IDs: ask})
	s.contact(err)
	if err != nil {
		return nil, fmt.Errorf("ask central the status of %d notifications: %w: %w", len(ask), err, ports.ErrUnavailable)
	}
	for i, id := range canon {
		if _, done := out[ids[i]]; done {
			continue
		}
		st, ok := central[id]
		if !ok || st == "" {
			st = ports.StatusUnknown
		}
		out[ids[i]] = st
	}
	return out, nil
}

// canonIDs returns ids in canonical form, at most MaxStatusIDs of them.
func (s *Site) canonIDs(ids []string) ([]string, error) {
	if len(ids) > s.cfg.MaxStatusIDs {
		return nil, fmt.Errorf("%d ids exceed the limit of %d: %w", len(ids), s.cfg.MaxStatusIDs, ports.ErrInvalid)
	}
	canon := make([]string, len(ids))
	for i, id := range ids {
		c, err := parseID(id)
		if err != nil {
			return nil, err
		}
		canon[i] = c
	}
	return canon, nil
}

// Health implements ports.Site.
func (s *Site) Health(ctx context.Context) (ports.SiteHealth, error) {
	st, err := s.buffer.Stats(ctx)
	if err != nil {
		return ports.SiteHealth{}, fmt.Errorf("read the buffer's stats: %w", err)
	}
	var ops []ports.OpKindStats
	if s.ops != nil {
		os, err := s.ops.OpStats(ctx)
		if err != nil {
			return ports.SiteHealth{}, fmt.Errorf("read the cached operations' stats: %w", err)
		}
		ops = os.Kinds
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ports.SiteHealth{
		Operations:         ops,
		Site:               s.cfg.Site,
		Node:               st.Replica.Node,
		Backlog:            st.Count,
		OldestEnqueuedAt:   st.OldestEnqueuedAt,
		Replica:            st.Replica,
		LastCentralContact: s.lastContact,
		LastCentralError:   s.lastErr,
	}, nil
}

// Wake asks the forwarder to look at the buffer now. It never blocks.
func (s *Site) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// contact records the outcome of a call to central for Health.
func (s *Site) contact(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lastErr = err.Error()
		return
	}
	s.lastContact = s.clock.Now().UTC()
	s.lastErr = ""
}
