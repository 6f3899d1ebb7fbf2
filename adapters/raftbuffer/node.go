// Package raftbuffer is the site's replicated buffer: [ports.Buffer] over a
// hashicorp/raft group of two data nodes and an optional witness.
//
// A [Node] is one member. Its log and stable store are one raft-boltdb file
// (raft.db); its state machine is a second bbolt file (buffer.db) holding the
// buffered notifications on disk, so a site that cannot reach central for
// days keeps millions of them without the memory to match. Writes go through
// the Raft log on the leader and return once a quorum has them and the
// leader has applied them; reads answer from the local file. DESIGN.md
// explains the choices: the bbolt FSM, batching, the restart without replay,
// snapshots streamed from the file, the witness and Recover.
package raftbuffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/internal/hclogslog"
	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// The files and limits of a node.
const (
	raftFile = "raft.db"
	// maxCommandBytes bounds one log entry; a larger Append is split into
	// several commands (each is atomic, the whole Append is not, which
	// Append's idempotence makes harmless).
	maxCommandBytes = 1 << 20
	// logCacheSize is how many recent log entries stay in memory for
	// replication: at most logCacheSize × maxCommandBytes; a Send's entry
	// (a batch of coalesced Sends) is at most 64 KiB or one notification,
	// so about 17 MiB at the default limits (DESIGN.md, "What Raft holds
	// in memory").
	logCacheSize = 256
	// maxRemoveIDs bounds the ids of one Remove command.
	maxRemoveIDs = 16384
	// transportTimeout bounds one Raft RPC (InstallSnapshot scales it).
	transportTimeout = 10 * time.Second
	// witnessRetry is how long a witness that could not hand leadership over
	// leads before it tries again.
	witnessRetry = 5 * time.Second
)

// Node is one member of a site's Raft group and its replicated buffer.
type Node struct {
	id      string
	witness bool
	cfg     Config
	log     *slog.Logger

	raft     *raft.Raft
	fsm      *fsm
	trans    *raft.NetworkTransport
	store    *logStore
	logs     raft.LogStore
	observer *raft.Observer
	obsCh    chan raft.Observation

	// stop is closed by Close; wg counts the goroutines the node owns (the
	// watcher, a witness's hand-over, waits on raft futures).
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	changed chan struct{} // closed and replaced on every change of role or leader
	// transferTerm is the last term in which a witness started handing
	// leadership over; settledTerm the last in which that attempt ended.
	transferTerm uint64
	settledTerm  uint64
	// leadTerm is the last term Leads saw this node lead in, leadIndex the
	// log's last index then; caughtTerm the last term in which the FSM had
	// applied up to it: the buffer then holds everything committed before
	// the term.
	leadTerm   uint64
	leadIndex  uint64
	caughtTerm uint64

	// rebuilding is set when Open set buffer.db aside as possibly torn:
	// until the node has applied its log again (openLastIndex, or what the
	// leader says is committed) its copy is older than what it had, and
	// its reads answer ErrUnavailable.
	rebuilding    atomic.Bool
	openLastIndex uint64

	// restoreSkipped records that Open found buffer.db up to date with the
	// newest snapshot and told raft not to restore it.
	restoreSkipped bool

	closeOnce sync.Once
	closeErr  error
}

var (
	_ ports.Buffer  = (*Node)(nil)
	_ ports.OpStore = (*Node)(nil)
)

// Open starts the node: it opens (or creates) the stores in cfg.Dir,
// bootstraps the group from cfg.Peers when the node has no Raft state yet,
// and starts Raft. It does not wait for a leader; see [Node.WaitLeader].
func Open(ctx context.Context, cfg Config) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	self := cfg.self()
	log := cfg.Logger.With("raft_node", cfg.NodeID)
	hl := hclogslog.New(log, raftLevel).Named("raft")

	var cleanup []func() error
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				_ = cleanup[i]()
			}
		}
	}()

	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftbuffer: create %s: %w", cfg.Dir, err)
	}
	st, err := openStores(cfg.Dir, hl)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, st.store.Close)

	hasState, err := raft.HasExistingState(st.logs, st.store, st.snaps)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: read raft state in %s: %w", cfg.Dir, err)
	}
	bufPath := filepath.Join(cfg.Dir, bufferFile)
	if !hasState {
		if err := setAsideOrphan(bufPath, log); err != nil {
			return nil, err
		}
	}
	f, err := openFSM(bufPath, log)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: %w", err)
	}
	cleanup = append(cleanup, f.close)
	skip, err := upToDate(f, st.snaps, st.logs)
	if err != nil {
		return nil, err
	}

	ln := cfg.Listener
	if ln == nil {
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Bind)
		if err != nil {
			return nil, fmt.Errorf("raftbuffer: listen on %s: %w", cfg.Bind, err)
		}
	}
	cleanup = append(cleanup, ln.Close)
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  newStreamLayer(ln, self.Address, cfg.TLS, cfg.Peers, raftHandshakeTimeout, cfg.Refusals, log),
		MaxPool: 3,
		Timeout: transportTimeout,
		Logger:  hl.Named("transport"),
	})
	cleanup = append(cleanup, trans.Close)

	rc := raftConfig(cfg, hl)
	rc.NoSnapshotRestoreOnStart = skip
	if !hasState {
		if err := raft.BootstrapCluster(rc, st.logs, st.store, st.snaps, trans, configuration(cfg.Peers)); err != nil {
			return nil, fmt.Errorf("raftbuffer: bootstrap the group: %w", err)
		}
		log.Info("raftbuffer: bootstrapped the group", "peers", len(cfg.Peers))
	}
	openLast, err := st.logs.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: read the last log index in %s: %w", cfg.Dir, err)
	}
	r, err := raft.NewRaft(rc, f, st.logs, st.store, st.snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: start raft: %w", err)
	}

	n = &Node{
		id:      cfg.NodeID,
		witness: self.Witness,
		cfg:     cfg,
		log:     log,
		raft:    r,
		fsm:     f,
		trans:   trans,
		store:   st.store,
		logs:    st.logs,
		obsCh:   make(chan raft.Observation, 64),
		stop:    make(chan struct{}),
		changed: make(chan struct{}),

		restoreSkipped: skip,
		openLastIndex:  openLast,
	}
	n.rebuilding.Store(f.setAside)
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	n.wg.Add(1)
	go n.watch()
	return n, nil
}

// stores are a node's Raft log, stable store and snapshots.
type stores struct {
	store *logStore
	logs  raft.LogStore
	snaps raft.SnapshotStore
}

func openStores(dir string, hl hclog.Logger) (stores, error) {
	opts := boltOptions(raftMmapSize)
	path, err := filepath.Abs(filepath.Join(dir, raftFile))
	if err != nil {
		return stores{}, fmt.Errorf("raftbuffer: open %s: %w", filepath.Join(dir, raftFile), err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: opts})
	if err != nil {
		return stores{}, fmt.Errorf("raftbuffer: open %s: %w", path, err)
	}
	// /proc/self/maps names the file by its path without symbolic links.
	mapped, err := filepath.EvalSymlinks(path)
	if err != nil {
		mapped = path
	}
	store := &logStore{BoltStore: bolt, path: mapped}
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		store.Close()
		return stores{}, fmt.Errorf("raftbuffer: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl.Named("snapshots"))
	if err != nil {
		store.Close()
		return stores{}, fmt.Errorf("raftbuffer: snapshot store in %s: %w", dir, err)
	}
	return stores{store: store, logs: logs, snaps: snaps}, nil
}

// raftMmapSize is the initial mmap of raft.db (virtual address space only):
// the log holds at most a few tens of thousands of entries between
// compactions.
const raftMmapSize = 256 << 20

// raftConfig is the raft configuration of cfg (defaults applied).
func raftConfig(cfg Config, hl hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	// Unbuffered: raft's leader loop still takes every Apply waiting to be
	// sent in one batch, and an Apply it never took is refused at shutdown.
	// With the buffered queue, an Apply queued as raft shuts down is never
	// answered, and whoever waits for it holds Close up.
	rc.BatchApplyCh = false
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	return rc
}

// peerIDs returns the ids of peers.
func peerIDs(peers []Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.ID
	}
	return out
}

// configuration is the group of peers, every one a voter.
func configuration(peers []Peer) raft.Configuration {
	var c raft.Configuration
	for _, p := range peers {
		c.Servers = append(c.Servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(p.ID),
			Address:  raft.ServerAddress(p.Address),
		})
	}
	return c
}

// setAsideOrphan renames a buffer file found without any Raft state: its
// applied index belongs to a log that is gone, and keeping it would make the
// FSM skip the new log's first entries. It is kept beside, never deleted.
func setAsideOrphan(path string, log *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	aside := path + ".orphaned"
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("raftbuffer: set aside %s: %w", path, err)
	}
	log.Warn("raftbuffer: buffer file without raft state set aside; the node starts empty", "file", aside)
	return nil
}

// upToDate reports whether buffer.db already holds everything the newest
// snapshot holds, so that raft need not restore it at start
// (Config.NoSnapshotRestoreOnStart): raft then replays the log after the
// snapshot and the FSM skips what it had applied. That is so when the file's
// last applied index reaches the snapshot's, or when every entry between the
// two is still in the log and none is a command (a leader's no-op or a
// barrier changes nothing in the buffer).
func upToDate(f *fsm, snaps raft.SnapshotStore, logs raft.LogStore) (bool, error) {
	list, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("raftbuffer: list snapshots: %w", err)
	}
	if len(list) == 0 {
		return false, nil
	}
	snap := list[0].Index
	applied, err := f.applied()
	if err != nil {
		return false, fmt.Errorf("raftbuffer: %w", err)
	}
	if applied >= snap {
		return true, nil
	}
	if snap-applied > 4096 {
		return false, nil
	}
	first, err := logs.FirstIndex()
	if err != nil || first == 0 || first > applied+1 {
		return false, nil
	}
	for i := applied + 1; i <= snap; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return false, nil
		}
	}
	return true, nil
}

// Close shuts Raft down (without leaving the group) and closes the stores.
// It may be called more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		var errs []error
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raftbuffer: shut raft down: %w", err))
		}
		n.raft.DeregisterObserver(n.observer)
		close(n.stop)
		n.wg.Wait()
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftbuffer: close transport: %w", err))
		}
		if err := n.fsm.close(); err != nil {
			errs = append(errs, fmt.Errorf("raftbuffer: %w", err))
		}
		if err := n.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftbuffer: close %s: %w", raftFile, err))
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// --- ports.Buffer --------------------------------------------------------------

// Append commits ns through the Raft log. On a node that is not the leader
// it fails at once with an error wrapping ports.ErrUnavailable that names
// the leader it knows; an outcome it cannot know (leadership lost after the
// entry went out, ctx ended first) is ErrUnavailable too: the caller sends
// again, and Append is idempotent per id. An empty id, or one over 1 KiB,
// refuses the whole batch with ports.ErrInvalid. ctx's deadline bounds the
// wait for a slot in raft's queue.
func (n *Node) Append(ctx context.Context, ns []ports.Submission) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("raftbuffer: append: %w", err)
	}
	if len(ns) == 0 {
		return nil
	}
	for i, s := range ns {
		if err := checkID(s.ID); err != nil {
			return fmt.Errorf("raftbuffer: append: notification %d: %w", i, err)
		}
	}
	if err := n.checkLeader("append"); err != nil {
		return err
	}
	var cmds [][]byte
	var batch []*pb.Submission
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		c, err := encodeAppend(batch)
		if err != nil {
			return fmt.Errorf("raftbuffer: append: %w", err)
		}
		cmds = append(cmds, c)
		batch, size = nil, 0
		return nil
	}
	for _, s := range toPBs(ns) {
		sz := proto.Size(s) + 8
		if size+sz > maxCommandBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, s)
		size += sz
	}
	if err := flush(); err != nil {
		return err
	}
	return n.apply(ctx, "append", cmds)
}

// Remove commits the removal of ids through the Raft log; errors as for
// Append.
func (n *Node) Remove(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("raftbuffer: remove: %w", err)
	}
	keep := make([]string, 0, len(ids))
	for _, id := range ids {
		if checkID(id) == nil { // other ids were never buffered
			keep = append(keep, id)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	if err := n.checkLeader("remove"); err != nil {
		return err
	}
	var cmds [][]byte
	for i := 0; i < len(keep); i += maxRemoveIDs {
		c, err := encodeRemove(keep[i:min(i+maxRemoveIDs, len(keep))])
		if err != nil {
			return fmt.Errorf("raftbuffer: remove: %w", err)
		}
		cmds = append(cmds, c)
	}
	return n.apply(ctx, "remove", cmds)
}

// Scan returns up to limit buffered notifications above after, in Seq
// order, from this node's copy. A limit below 1 is ports.ErrInvalid.
func (n *Node) Scan(ctx context.Context, after uint64, limit int) ([]ports.Buffered, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raftbuffer: scan: %w", err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("raftbuffer: scan: limit %d is below 1: %w", limit, ports.ErrInvalid)
	}
	if err := n.fresh("scan"); err != nil {
		return nil, err
	}
	out, err := n.fsm.scan(after, limit)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: scan: %w", err)
	}
	return out, nil
}

// Contains returns the subset of ids buffered in this node's copy.
func (n *Node) Contains(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raftbuffer: contains: %w", err)
	}
	if err := n.fresh("contains"); err != nil {
		return nil, err
	}
	out, err := n.fsm.contains(ids)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: contains: %w", err)
	}
	return out, nil
}

// Stats reports this node's copy (count from the file's meta, the oldest
// from its first item) and its place in the group.
func (n *Node) Stats(ctx context.Context) (ports.BufferStats, error) {
	if err := ctx.Err(); err != nil {
		return ports.BufferStats{}, fmt.Errorf("raftbuffer: stats: %w", err)
	}
	count, oldest, err := n.fsm.stats()
	if err != nil {
		return ports.BufferStats{}, fmt.Errorf("raftbuffer: stats: %w", err)
	}
	_, leader := n.raft.LeaderWithID()
	return ports.BufferStats{
		Count:            count,
		OldestEnqueuedAt: oldest,
		Replica: ports.ReplicaState{
			Node:   n.id,
			Role:   role(n.raft.State()),
			Term:   n.raft.CurrentTerm(),
			Leader: string(leader),
		},
	}, nil
}

// role maps raft's state to the port's.
func role(s raft.RaftState) ports.Role {
	switch s {
	case raft.Leader:
		return ports.RoleLeader
	case raft.Candidate:
		return ports.RoleCandidate
	case raft.Shutdown:
		return ports.RoleShutdown
	}
	return ports.RoleFollower
}

// checkLeader fails fast on a node that is not the leader.
func (n *Node) checkLeader(op string) error {
	if n.raft.State() == raft.Leader {
		return nil
	}
	return fmt.Errorf("raftbuffer: %s: node %q is not the leader (leader %s): %w",
		op, n.id, n.leaderText(), ports.ErrUnavailable)
}

// leaderText names the known leader for an error text.
func (n *Node) leaderText() string {
	if _, id := n.raft.LeaderWithID(); id != "" {
		return fmt.Sprintf("%q", id)
	}
	return "unknown"
}

// apply submits the commands in order and waits until each is committed and
// applied here, or ctx ends. Every failure wraps ports.ErrUnavailable except
// a command the FSM refused.
func (n *Node) apply(ctx context.Context, op string, cmds [][]byte) error {
	_, err := n.applyAll(ctx, op, cmds)
	return err
}

// applyAll is apply that returns each command's answer from the FSM.
func (n *Node) applyAll(ctx context.Context, op string, cmds [][]byte) ([]any, error) {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, fmt.Errorf("raftbuffer: %s: %w", op, context.DeadlineExceeded)
		}
	}
	futures := make([]raft.ApplyFuture, len(cmds))
	for i, c := range cmds {
		futures[i] = n.raft.Apply(c, timeout)
		n.endWithNode(futures[i])
	}
	err := n.await(ctx, func() error {
		for _, f := range futures {
			if err := f.Error(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, n.unavailable(op, err)
	}
	answers := make([]any, len(futures))
	for i, f := range futures {
		answers[i] = f.Response()
		if e, ok := answers[i].(error); ok && e != nil {
			return nil, fmt.Errorf("raftbuffer: %s: %w", op, e)
		}
	}
	return answers, nil
}

// endWithNode makes a future of raft.Apply answer ErrRaftShutdown once the
// node has shut raft down (n.stop), as raft's own futures of other kinds
// do (their ShutdownCh): raft leaves a command unanswered when it shuts
// down after committing it but before its FSM goroutine took it (the
// batch is dropped with the FSM's queue), and Close, which waits for every
// await, would then wait for ever. Raft sets no ShutdownCh on an Apply's
// future, so this sets it, through reflection since the future's type is
// raft's own; a future of another shape (an error future) is left as it
// is. Raft never reads the field: only Error does, on the caller's side.
func (n *Node) endWithNode(f raft.ApplyFuture) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	index := shutdownChIndex(v.Type())
	if index == nil {
		return
	}
	if ch := v.Elem().FieldByIndex(index); ch.CanSet() && ch.IsNil() {
		ch.Set(reflect.ValueOf(n.stop))
	}
}

// shutdownChIndexes caches, per future type, the index of its settable
// ShutdownCh field of the node's stop channel's type (nil: none), so that
// an Append, on the site's hot path, looks the field up once per type
// rather than by name each time.
var shutdownChIndexes sync.Map // reflect.Type → []int

// shutdownChIndex is the index of t's ShutdownCh field (t a pointer to a
// struct), or nil.
func shutdownChIndex(t reflect.Type) []int {
	if index, ok := shutdownChIndexes.Load(t); ok {
		return index.([]int)
	}
	var index []int
	if t.Elem().Kind() == reflect.Struct {
		if f, ok := t.Elem().FieldByName("ShutdownCh"); ok && f.IsExported() && f.Type == reflect.TypeFor[chan struct{}]() {
			index = f.Index
		}
	}
	shutdownChIndexes.Store(t, index)
	return index
}

// errOutcomeUnknown reports a wait that ctx ended before raft answered.
var errOutcomeUnknown = errors.New("outcome unknown")

// await runs wait, which blocks on raft futures, until it returns or ctx
// ends. The goroutine that runs it belongs to the node: raft answers every
// future by Shutdown at the latest, or the node's stop does (endWithNode),
// and Close waits for it.
func (n *Node) await(ctx context.Context, wait func() error) error {
	if ctx.Done() == nil {
		return wait()
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return raft.ErrRaftShutdown
	}
	n.wg.Add(1)
	n.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer n.wg.Done()
		done <- wait()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ctx.Err(), errOutcomeUnknown)
	}
}

// unavailable wraps a raft error (not the leader, leadership lost, shut
// down, timed out, outcome unknown) as ports.ErrUnavailable.
func (n *Node) unavailable(op string, err error) error {
	return fmt.Errorf("raftbuffer: %s on node %q (leader %s): %w: %w", op, n.id, n.leaderText(), err, ports.ErrUnavailable)
}

// --- leadership ----------------------------------------------------------------

// Leader returns the id of the leader this node knows ("" if none) and
// whether it is this node.
func (n *Node) Leader() (id string, self bool) {
	_, l := n.raft.LeaderWithID()
	return string(l), l != "" && string(l) == n.id
}

// Leads reports whether this node leads and may take writes now: it is the
// Raft leader, its buffer holds everything committed before its term and,
// for a witness, it has settled its attempt to hand leadership over (while
// it hands over, raft refuses every write). A site API that attempts a
// cached call before it commits the outcome asks this first, so that a
// node about to refuse the commit, or whose copy does not yet show a row
// committed in an earlier term, never attempts.
//
// "Holds everything" is read from the log, not from a barrier: a barrier's
// future that raft takes into its queue as it shuts down is never answered
// (its apply queue is buffered), and whoever waits for it would hold up
// Close. The first call in a term notes the log's last index; the term is
// caught up once the FSM has applied up to it.
func (n *Node) Leads() bool {
	if n.raft.State() != raft.Leader {
		return false
	}
	term := n.raft.CurrentTerm()
	n.mu.Lock()
	if n.witness && n.settledTerm < term {
		n.mu.Unlock()
		return false
	}
	if n.caughtTerm >= term {
		n.mu.Unlock()
		return true
	}
	if n.leadTerm != term {
		n.leadTerm, n.leadIndex = term, n.raft.LastIndex()
	}
	target := n.leadIndex
	n.mu.Unlock()
	if n.raft.AppliedIndex() < target || !n.fsmReached(target) {
		return false
	}
	n.mu.Lock()
	n.caughtTerm = max(n.caughtTerm, term)
	n.mu.Unlock()
	return true
}

// fsmReached reports whether buffer.db has applied every command up to
// index. Raft counts an entry applied once it is handed to the FSM, not
// once the FSM has applied it; and the FSM sees only commands, so its own
// index stays below a later no-op or configuration entry. So: every entry
// between the FSM's index and index is not a command.
func (n *Node) fsmReached(index uint64) bool {
	applied, err := n.fsm.applied()
	if err != nil {
		return false
	}
	for i := index; i > applied; i-- {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return false
		}
	}
	return true
}

// fresh returns nil when this node's copy may answer reads: always, except
// after Open set buffer.db aside as possibly torn, until raft has applied
// again what the log held at Open, or what a known leader says is
// committed. Until then the copy is the newest snapshot's, older than
// what the node had answered before, and fresh returns an error wrapping
// ports.ErrUnavailable: the caller asks another node.
func (n *Node) fresh(op string) error {
	if !n.rebuilding.Load() {
		return nil
	}
	target := n.openLastIndex
	if leader, _ := n.Leader(); leader != "" && n.raft.CommitIndex() > 0 {
		target = n.raft.CommitIndex()
	}
	if n.raft.AppliedIndex() >= target && n.fsmReached(target) {
		n.rebuilding.Store(false)
		n.log.Info("raftbuffer: the buffer file is rebuilt from the snapshot and the log", "applied_index", target)
		return nil
	}
	return fmt.Errorf("raftbuffer: %s: node %q is rebuilding its buffer from its log after the machine restarted: %w",
		op, n.id, ports.ErrUnavailable)
}

// WaitLeader blocks until the node knows a leader, and returns its id. It
// fails when ctx ends or the node closes, with an error wrapping
// ports.ErrUnavailable.
func (n *Node) WaitLeader(ctx context.Context) (string, error) {
	for {
		ch := n.changes()
		if id, _ := n.Leader(); id != "" {
			return id, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("raftbuffer: wait for a leader on node %q: %w: %w", n.id, ctx.Err(), ports.ErrUnavailable)
		case <-n.stop:
			return "", fmt.Errorf("raftbuffer: wait for a leader: node %q is closed: %w", n.id, ports.ErrUnavailable)
		}
	}
}

// Lead runs fn for each term in which this node leads, until ctx ends or
// the node closes. Each time the node becomes leader it first waits for a
// Raft barrier, so the buffer holds everything committed before, then calls
// fn with a context that is cancelled when the leadership ends (or ctx
// does). It waits for fn to return before it waits for the next term. A
// witness runs fn only when it could not hand leadership over.
func (n *Node) Lead(ctx context.Context, fn func(ctx context.Context)) {
	for {
		term, ok := n.awaitLeadership(ctx)
		if !ok {
			return
		}
		if err := n.barrier(ctx); err != nil {
			if ctx.Err() != nil || n.isClosed() {
				return
			}
			n.log.Debug("raftbuffer: barrier before leading failed", "term", term, "err", err)
			n.pause(ctx, term)
			continue
		}
		leaderCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn(leaderCtx)
		}()
		n.awaitLoss(ctx, term, done)
		cancel()
		<-done
	}
}

// awaitLeadership waits until this node leads (for a witness: and has
// settled its hand-over attempt of the term) and returns the term.
func (n *Node) awaitLeadership(ctx context.Context) (uint64, bool) {
	for {
		ch := n.changes()
		if n.raft.State() == raft.Leader {
			term := n.raft.CurrentTerm()
			if !n.witness || n.settled(term) {
				return term, true
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false
		case <-n.stop:
			return 0, false
		}
	}
}

// awaitLoss waits until the node no longer leads in term, ctx ends or the
// node closes. done, when it closes, stops nothing: fn may end early.
func (n *Node) awaitLoss(ctx context.Context, term uint64, done <-chan struct{}) {
	for {
		ch := n.changes()
		if !n.leads(term) {
			return
		}
		select {
		case <-ch:
		case <-done:
			done = nil
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		}
	}
}

// pause waits for a change, or an election timeout, before Lead tries the
// barrier of term again.
func (n *Node) pause(ctx context.Context, term uint64) {
	t := time.NewTimer(n.cfg.ElectionTimeout)
	defer t.Stop()
	ch := n.changes()
	if !n.leads(term) {
		return
	}
	select {
	case <-t.C:
	case <-ch:
	case <-ctx.Done():
	case <-n.stop:
	}
}

// barrier waits until every entry committed before it is applied here.
func (n *Node) barrier(ctx context.Context) error {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := n.raft.Barrier(timeout)
	return n.await(ctx, f.Error)
}

// leads reports whether the node is leader in term.
func (n *Node) leads(term uint64) bool {
	return n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// changes returns a channel closed at the next change of role or leader.
func (n *Node) changes() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// broadcast wakes every waiter on changes.
func (n *Node) broadcast() {
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

// settled reports whether the witness's hand-over attempt of term ended.
func (n *Node) settled(term uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settledTerm >= term
}

// settle records that the hand-over attempt of term ended.
func (n *Node) settle(term uint64) {
	n.mu.Lock()
	if term > n.settledTerm {
		n.settledTerm = term
	}
	n.mu.Unlock()
	n.broadcast()
}

// watch is the node's one reader of raft observations: it wakes the
// waiters, starts a witness's hand-over, and shuts raft down if the FSM
// failed. Close stops it.
func (n *Node) watch() {
	defer n.wg.Done()
	failed := n.fsm.failedCh
	n.checkWitness() // leadership gained before the observer was registered
	for {
		select {
		case <-n.obsCh:
			n.broadcast()
			n.checkWitness()
		case <-failed:
			failed = nil
			n.log.Error("raftbuffer: shutting raft down: the buffer file no longer follows the log; restart the node",
				"err", n.fsm.failure())
			n.raft.Shutdown()
			n.broadcast()
		case <-n.stop:
			return
		}
	}
}

// checkWitness starts handing leadership over when a witness has just
// become leader.
func (n *Node) checkWitness() {
	if !n.witness || n.raft.State() != raft.Leader {
		return
	}
	term := n.raft.CurrentTerm()
	n.mu.Lock()
	if n.closed || term <= n.transferTerm {
		n.mu.Unlock()
		return
	}
	n.transferTerm = term
	n.wg.Add(1)
	n.mu.Unlock()
	go n.handOver(term)
}

// handOver asks raft to transfer a witness's leadership of term to the most
// up-to-date voter. If that fails the witness goes on leading (Lead runs
// its fn) and tries again every witnessRetry while it leads.
func (n *Node) handOver(term uint64) {
	defer n.wg.Done()
	defer n.settle(term)
	for {
		if !n.leads(term) {
			return
		}
		err := n.transferToDataNode()
		if err == nil {
			n.log.Info("raftbuffer: witness handed leadership over", "term", term)
			return
		}
		if !n.leads(term) {
			return
		}
		n.log.Warn("raftbuffer: witness keeps leading: could not hand leadership over", "term", term, "err", err)
		n.settle(term)
		t := time.NewTimer(witnessRetry)
	wait:
		for {
			ch := n.changes()
			if !n.leads(term) {
				t.Stop()
				return
			}
			select {
			case <-t.C:
				break wait
			case <-ch:
			case <-n.stop:
				t.Stop()
				return
			}
		}
	}
}

// transferToDataNode hands leadership to the first data node that takes it.
// raft's own LeadershipTransfer picks the most up-to-date voter whether or
// not it is alive, which after a data node died is often the dead one; so
// each data node is asked in turn (a dead one fails within an election
// timeout).
func (n *Node) transferToDataNode() error {
	var errs []error
	for _, p := range n.cfg.Peers {
		if p.Witness || p.ID == n.cfg.NodeID {
			continue
		}
		var err error
		// raft clears its in-progress flag a moment after a failed
		// transfer reports: wait for it rather than skip this node.
		for try := 0; try < 40; try++ {
			err = n.raft.LeadershipTransferToServer(raft.ServerID(p.ID), raft.ServerAddress(p.Address)).Error()
			if !errors.Is(err, raft.ErrLeadershipTransferInProgress) {
				break
			}
			select {
			case <-time.After(25 * time.Millisecond):
			case <-n.stop:
				return err
			}
		}
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("to %s: %w", p.ID, err))
	}
	return errors.Join(errs...)
}

// Snapshot makes Raft take a snapshot now and compact its log (tests,
// operators). Nothing new since the last snapshot is not an error.
func (n *Node) Snapshot() error {
	err := n.raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("raftbuffer: snapshot on node %q: %w", n.id, err)
	}
	return nil
}
