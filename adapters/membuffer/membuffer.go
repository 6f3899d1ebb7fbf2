// Package membuffer is an in-memory [ports.Buffer] for the core's unit tests:
// one mutex, no replication, always the leader of a group of one. It passes
// ports/buffertest like adapters/raftbuffer does, and [Buffer.SetAvailable]
// lets a test make it refuse writes as a node without a Raft leader would.
package membuffer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/siteline/outbox/ports"
)

// Buffer is an in-memory ports.Buffer. The zero value is not usable; call
// [New].
type Buffer struct {
	node string

	mu          sync.Mutex
	unavailable bool
	// next is the Seq the next notification gets; it never goes back.
	next uint64
	// items holds the buffered notifications by Seq; bySeq is the Seqs in
	// increasing order, including some already removed (dropped lazily).
	items map[uint64]ports.Submission
	bySeq []uint64
	ids   map[string]uint64
}

var _ ports.Buffer = (*Buffer)(nil)

// New returns an empty buffer that reports itself as node, the leader of
// its group in term 1.
func New(node string) *Buffer {
	return &Buffer{
		node:  node,
		next:  1,
		items: make(map[uint64]ports.Submission),
		ids:   make(map[string]uint64),
	}
}

// SetAvailable makes writes succeed (true, the default) or fail with an
// error wrapping ports.ErrUnavailable (false), as on a node that cannot
// commit. Reads keep answering.
func (b *Buffer) SetAvailable(ok bool) {
	b.mu.Lock()
	b.unavailable = !ok
	b.mu.Unlock()
}

// Append buffers ns in order; ids already buffered are left as they are. An
// empty id refuses the whole batch with an error wrapping ports.ErrInvalid.
func (b *Buffer) Append(ctx context.Context, ns []ports.Submission) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("membuffer: append: %w", err)
	}
	if len(ns) == 0 {
		return nil
	}
	for i, n := range ns {
		if n.ID == "" {
			return fmt.Errorf("membuffer: append: notification %d has no id: %w", i, ports.ErrInvalid)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return fmt.Errorf("membuffer: append: node %q cannot commit: %w", b.node, ports.ErrUnavailable)
	}
	for _, n := range ns {
		if _, ok := b.ids[n.ID]; ok {
			continue
		}
		seq := b.next
		b.next++
		b.items[seq] = clone(n)
		b.bySeq = append(b.bySeq, seq)
		b.ids[n.ID] = seq
	}
	return nil
}

// Remove drops the notifications with these ids; unknown ids are ignored.
func (b *Buffer) Remove(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("membuffer: remove: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return fmt.Errorf("membuffer: remove: node %q cannot commit: %w", b.node, ports.ErrUnavailable)
	}
	for _, id := range ids {
		if seq, ok := b.ids[id]; ok {
			delete(b.ids, id)
			delete(b.items, seq)
		}
	}
	// Drop removed Seqs once they are the majority, so that scans stay
	// proportional to what is buffered.
	if len(b.bySeq) > 2*len(b.items)+64 {
		b.bySeq = slices.DeleteFunc(b.bySeq, func(s uint64) bool {
			_, ok := b.items[s]
			return !ok
		})
	}
	return nil
}

// Scan returns up to limit notifications with a Seq above after, in Seq
// order. A limit below 1 is an error wrapping ports.ErrInvalid.
func (b *Buffer) Scan(ctx context.Context, after uint64, limit int) ([]ports.Buffered, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("membuffer: scan: %w", err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("membuffer: scan: limit %d is below 1: %w", limit, ports.ErrInvalid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []ports.Buffered
	for i := sort.Search(len(b.bySeq), func(i int) bool { return b.bySeq[i] > after }); i < len(b.bySeq) && len(out) < limit; i++ {
		seq := b.bySeq[i]
		if n, ok := b.items[seq]; ok {
			out = append(out, ports.Buffered{Seq: seq, Submission: clone(n)})
		}
	}
	return out, nil
}

// Contains returns the subset of ids that are buffered.
func (b *Buffer) Contains(ctx context.Context, ids []string) (map[string]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("membuffer: contains: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]bool)
	for _, id := range ids {
		if _, ok := b.ids[id]; ok {
			out[id] = true
		}
	}
	return out, nil
}

// Stats reports the count, the lowest Seq's enqueue time and the node as
// the leader of term 1.
func (b *Buffer) Stats(ctx context.Context) (ports.BufferStats, error) {
	if err := ctx.Err(); err != nil {
		return ports.BufferStats{}, fmt.Errorf("membuffer: stats: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := ports.BufferStats{
		Count:   int64(len(b.items)),
		Replica: ports.ReplicaState{Node: b.node, Role: ports.RoleLeader, Term: 1, Leader: b.node},
	}
	for _, seq := range b.bySeq {
		if n, ok := b.items[seq]; ok {
			st.OldestEnqueuedAt = n.SiteEnqueuedAt
			break
		}
	}
	return st, nil
}

// clone copies n so that neither the caller nor the buffer sees the other's
// later changes, with its times in UTC as a stored copy would have them.
func clone(n ports.Submission) ports.Submission {
	n.TypeData = slices.Clone(n.TypeData)
	if !n.ExpiresAt.IsZero() {
		n.ExpiresAt = n.ExpiresAt.UTC()
	}
	if !n.SiteEnqueuedAt.IsZero() {
		n.SiteEnqueuedAt = n.SiteEnqueuedAt.UTC()
	}
	return n
}
