package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// Deps are the driven ports the Service needs.
type Deps struct {
	Store     ports.Store
	Audit     ports.AuditLog
	Channels  ports.ChannelRegistry
	Directory ports.Directory
	// Clock defaults to ports.SystemClock.
	Clock ports.Clock
	// Logger defaults to one that discards.
	Logger *slog.Logger
	// Observer, when set, is told about every delivery attempt (metrics).
	Observer ports.DeliveryObserver
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

	// owner names this Service's leases: NodeID plus a random suffix, so two
	// services configured with one NodeID never share a lease.
	owner string
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

var _ ports.Outbox = (*Service)(nil)

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
	if cfg.NodeID == "" {
		cfg.NodeID = "node-" + randomHex(4)
	}
	return &Service{
		cfg:       cfg,
		store:     deps.Store,
		audit:     deps.Audit,
		channels:  deps.Channels,
		directory: deps.Directory,
		clock:     deps.Clock,
		log:       deps.Logger,
		observer:  deps.Observer,
		owner:     cfg.NodeID + "/" + randomHex(4),
		wake:      make(chan struct{}, 1),
		inFlight:  make(chan struct{}, cfg.DispatchConcurrency),
		policies:  make(map[string]cachedPolicy),
	}, nil
}

// Config returns the configuration in force, defaults applied.
func (s *Service) Config() Config { return s.cfg }

// Owner returns the name this Service's leases carry.
func (s *Service) Owner() string { return s.owner }

// Run runs the dispatcher and the purge until ctx is done, then waits for
// in-flight deliveries to stop (they see ctx's cancellation) and for their
// outcomes to be recorded. It returns nil after a cancellation. Run may be
// called once at a time.
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

	s.log.Info("outbox running", "owner", s.owner,
		"dispatch_interval", s.cfg.DispatchInterval.String(), "batch", s.cfg.DispatchBatchSize,
		"concurrency", s.cfg.DispatchConcurrency)
	var wg sync.WaitGroup
	wg.Go(func() { s.dispatchLoop(ctx) })
	wg.Go(func() { s.purgeLoop(ctx) })
	wg.Wait()
	s.log.Info("outbox stopped", "owner", s.owner)
	return nil
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

func (noObserver) Attempted(string, ports.Outcome, time.Duration) {}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
