package ports

import (
	"context"
	"time"
)

// Site is the driving port of a site node: what the site API
// (adapters/siteapi), the CLI and the acceptance tests call. core.Site
// implements it.
//
// Errors wrap ErrInvalid for bad input (nothing is buffered) and
// ErrUnavailable when the node cannot commit or answer now (no Raft leader,
// central out of reach for a status); the request may then be repeated.
type Site interface {
	// Send validates req, stamps it with its id, the enqueue time and the
	// site's provenance, and returns the id once the notification is
	// committed to the replicated buffer. A Send repeated with the same
	// req.ID is buffered once.
	Send(ctx context.Context, req SendRequest) (id string, err error)

	// Status answers StatusForwarding for ids still buffered at the site,
	// central's status for the others (ports.Central.Status), and
	// StatusUnknown for ids neither knows.
	Status(ctx context.Context, ids []string) (map[string]Status, error)

	// Health reports the node's backlog, replication state and last contact
	// with central.
	Health(ctx context.Context) (SiteHealth, error)
}

// SendRequest is one notification as a script hands it to its site.
type SendRequest struct {
	// ID, when set, is a UUID the caller chose, so that a Send retried after
	// a lost answer is buffered once. Empty means the site generates one.
	ID string
	// List names the notification list; required.
	List    string
	Subject string
	Body    string

	// Provenance of the caller; the site id is the node's, never the caller's.
	SourceInstance    string
	SourceScript      string
	ExecutionID       string
	ParentExecutionID string
}

// SiteHealth is the health of one site node.
type SiteHealth struct {
	// Site and Node name the site and this node.
	Site string
	Node string
	// Backlog counts the notifications buffered, not yet acknowledged by
	// central; OldestEnqueuedAt is the oldest one's enqueue time (zero when
	// the backlog is empty).
	Backlog          int64
	OldestEnqueuedAt time.Time
	// Replica is the node's place in its Raft group.
	Replica ReplicaState
	// LastCentralContact is when this node last completed a call to central
	// (zero if never): while it leads, its forwarder's calls; while it
	// follows, its Syncs. LastCentralError is the error of the last failed
	// such call since then, "" if the last call succeeded.
	LastCentralContact time.Time
	LastCentralError   string
	// Operations are the node's cached calls and writes, per kind: the
	// backlog waiting for a retry, the parked ones and the oldest buffered
	// one's creation. Empty when the site defines no target.
	Operations []OpKindStats
}

// Buffer is a site's replicated store-and-forward buffer: the
// notifications accepted at the site and not yet acknowledged by central.
// adapters/raftbuffer implements it over a Raft group; ports/buffertest is
// the contract every implementation passes.
//
// Writes (Append, Remove) succeed only on the node that can commit them (the
// Raft leader) and return once committed to a quorum and applied locally;
// elsewhere they fail with an error wrapping ErrUnavailable and change
// nothing. Reads (Scan, Contains, Stats) answer from the local copy.
type Buffer interface {
	// Append commits ns in order. A notification whose ID is already
	// buffered is left as it is.
	Append(ctx context.Context, ns []Submission) error

	// Remove commits the removal of ids; ids not buffered are ignored.
	Remove(ctx context.Context, ids []string) error

	// Scan returns up to limit buffered notifications whose Seq is greater
	// than after, in Seq order (the order they were appended).
	Scan(ctx context.Context, after uint64, limit int) ([]Buffered, error)

	// Contains returns the subset of ids that are buffered.
	Contains(ctx context.Context, ids []string) (map[string]bool, error)

	// Stats reports the backlog and the replication state.
	Stats(ctx context.Context) (BufferStats, error)
}

// Buffered is one notification in a Buffer.
type Buffered struct {
	// Seq is the notification's position in the buffer: assigned at Append,
	// increasing, the same on every replica, never reused.
	Seq uint64
	Submission
}

// BufferStats describes a Buffer at one instant.
type BufferStats struct {
	// Count is the number of notifications buffered.
	Count int64
	// OldestEnqueuedAt is the SiteEnqueuedAt of the lowest Seq buffered;
	// zero when the buffer is empty.
	OldestEnqueuedAt time.Time
	// Replica is the node's place in its replication group.
	Replica ReplicaState
}

// Role is a node's place in its Raft group.
type Role string

// The roles a node can hold.
const (
	// RoleLeader commits writes and forwards to central.
	RoleLeader Role = "leader"
	// RoleFollower replicates the leader's log.
	RoleFollower Role = "follower"
	// RoleCandidate is seeking election; the group has no leader it knows.
	RoleCandidate Role = "candidate"
	// RoleShutdown is a node that has stopped.
	RoleShutdown Role = "shutdown"
)

// ReplicaState is a node's view of its replication group.
type ReplicaState struct {
	// Node is this node's id.
	Node string
	Role Role
	// Term is the Raft term the node is in.
	Term uint64
	// Leader is the id of the leader the node knows, "" if none.
	Leader string
}
