package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siteline/outbox/ports"
)

// Deps are the driven ports the Service needs.
type Deps struct {
	Store ports.Store
	// Audit is the audit log: operator actions append to it, and History
	// reads it. The dispatcher's records go with its outcomes, through
	// Store.Record, into the store's own log: Audit must read that log
	// (the SQL stores and memstore are both).
	Audit     ports.AuditLog
	Channels  ports.ChannelRegistry
	Directory ports.Directory
	// Clock defaults to ports.SystemClock.
	Clock ports.Clock
	// Logger defaults to one that discards.
	Logger *slog.Logger
	// Observer, when set, is told about every delivery attempt (metrics).
	Observer ports.DeliveryObserver
	// SiteCalls is the mirror of the sites' cached operations, their
	// nodes' health and the commands relayed to them. Without it,
	// ReportOperations, Sync and the ports.SiteCalls methods fail with an
	// error wrapping ErrUnavailable.
	SiteCalls ports.SiteCallStore
}

// Service is central's outbox: it implements the driving port ports.Outbox
// and, in Run, the dispatcher and the purge.
type Service struct {
	cfg       Config
	store     ports.Store
	audit     ports.AuditLog
	channels  ports.ChannelRegistry
	directory ports.Directory
	clock     ports.Clock
	log       *slog.Logger
	observer  ports.DeliveryObserver
	siteCalls ports.SiteCallStore

	// relay is the state of the site link's reconciliation and long polls.
	relay relayState

	// owner names this Service's leases: ports.LeaseOwner of NodeID and a
	// random run id, so two runs under one NodeID never share a lease. The
	// dispatcher replaces the run id after a claim whose answer was lost
	// (see renewOwner); every batch keeps the name it was claimed under.
	owner atomic.Pointer[string]
	// claimDoubt is set when a claim failed and may have committed all the
	// same. Only the dispatch loop reads and writes it.
	claimDoubt bool
	// namedNode is set when NodeID was configured rather than drawn at
	// random: only then may an earlier run have left leases under it.
	namedNode bool
	// wake holds at most one pending wake-up of the dispatcher.
	wake chan struct{}
	// inFlight bounds the deliveries running at once on this node, across
	// every batch of the pipeline (DispatchConcurrency).
	inFlight chan struct{}

	policyMu sync.Mutex
	policies map[string]cachedPolicy

	runMu   sync.Mutex
	running bool
}

var (
	_ ports.Outbox    = (*Service)(nil)
	_ ports.SiteCalls = (*Service)(nil)
)

// New builds a Service. cfg's zero fields take their defaults; an invalid cfg
// or a missing dependency is an error.
func New(cfg Config, deps Deps) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	if deps.Store == nil {
		errs = append(errs, errors.New("core: Deps.Store is nil"))
	}
	if deps.Audit == nil {
		errs = append(errs, errors.New("core: Deps.Audit is nil"))
	}
	if deps.Channels == nil {
		errs = append(errs, errors.New("core: Deps.Channels is nil"))
	}
	if deps.Directory == nil {
		errs = append(errs, errors.New("core: Deps.Directory is nil"))
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
	if deps.Observer == nil {
		deps.Observer = noObserver{}
	}
	namedNode := cfg.NodeID != ""
	if !namedNode {
		cfg.NodeID = "node-" + randomHex(4)
	}
	s := &Service{
		cfg:       cfg,
		store:     deps.Store,
		audit:     deps.Audit,
		channels:  deps.Channels,
		directory: deps.Directory,
		clock:     deps.Clock,
		log:       deps.Logger,
		observer:  deps.Observer,
		siteCalls: deps.SiteCalls,
		namedNode: namedNode,
		wake:      make(chan struct{}, 1),
		inFlight:  make(chan struct{}, cfg.DispatchConcurrency),
		policies:  make(map[string]cachedPolicy),
	}
	s.relay.init()
	s.setOwner()
	return s, nil
}

// setOwner gives this Service a new lease owner name, with a new run id.
func (s *Service) setOwner() string {
	owner := ports.LeaseOwner(s.cfg.NodeID, randomHex(4))
	s.owner.Store(&owner)
	return owner
}

// Config returns the configuration in force, defaults applied.
func (s *Service) Config() Config { return s.cfg }

// Owner returns the name this Service's leases carry.
func (s *Service) Owner() string { return *s.owner.Load() }

// Run runs the dispatcher and the purge until ctx is done, then waits for
// in-flight deliveries to stop (they see ctx's cancellation) and for their
// outcomes to be recorded. It returns nil after a cancellation. Run may be
// called once at a time.
//
// When NodeID was configured, Run first releases the leases that earlier
// runs of this node left (ports.Store.ReleaseNode), so that the rows a
// crashed run was delivering are claimed again at once rather than after
// ClaimLease; each of them may then be delivered a second time, the one
// repeat a crash costs. A failure there is logged and not fatal: those
// leases expire on their own.
func (s *Service) Run(ctx context.Context) error {
	s.runMu.Lock()
	if s.running {
		s.runMu.Unlock()
		return errors.New("core: Service.Run is already running")
	}
	s.running = true
	s.runMu.Unlock()
	defer func() {
		s.runMu.Lock()
		s.running = false
		s.runMu.Unlock()
	}()

	s.log.Info("outbox running", "owner", s.Owner(),
		"dispatch_interval", s.cfg.DispatchInterval.String(), "batch", s.cfg.DispatchBatchSize,
		"concurrency", s.cfg.DispatchConcurrency)
	if s.namedNode {
		s.releaseEarlierRuns(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.dispatchLoop(ctx) })
	wg.Go(func() { s.purgeLoop(ctx) })
	wg.Wait()
	s.log.Info("outbox stopped", "owner", s.Owner())
	return nil
}

// releaseNodeTimeout bounds the release of an earlier run's leases at start.
const releaseNodeTimeout = 30 * time.Second

// releaseEarlierRuns releases the leases that earlier runs under this
// NodeID left, keeping this run's own.
func (s *Service) releaseEarlierRuns(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, releaseNodeTimeout)
	defer cancel()
	n, err := s.store.ReleaseNode(rctx, s.cfg.NodeID, s.Owner())
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("cannot release the leases of an earlier run of this node; they expire on their own",
			"node_id", s.cfg.NodeID, "claim_lease", s.cfg.ClaimLease.String(), "err", err)
	case err == nil && n > 0:
		s.log.Info("released the leases of an earlier run of this node", "node_id", s.cfg.NodeID, "rows", n)
	}
}

// Wake asks the dispatcher to sweep now. It never blocks.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// noObserver is the DeliveryObserver of a Service built without one.
type noObserver struct{}

func (noObserver) Attempted(string, ports.Outcome, time.Duration, []ports.Outcome) {}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
