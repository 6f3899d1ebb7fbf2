package raftbuffer

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// --- ports.OpStore -------------------------------------------------------------

// Put commits changes to cached operations through the Raft log; the state
// machine evaluates each change's From against the stored row, so every
// node decides the same. Changes larger together than one log entry go in
// several commands, in order (each change applies or not on its own, so
// nothing is lost by the split). An invalid change (empty or over-long id,
// unknown kind or status, a payload over 1 MiB, other text over 64 KiB,
// text that is not UTF-8) refuses the whole call with ports.ErrInvalid
// before anything is submitted. On a node that is not the leader, or when
// the outcome cannot be known, the error wraps ports.ErrUnavailable, as
// for Append.
func (n *Node) Put(ctx context.Context, changes []ports.OpChange) ([]bool, error) {
	const op = "put operations"
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raftbuffer: %s: %w", op, err)
	}
	if len(changes) == 0 {
		return nil, nil
	}
	pbs := make([]*pb.OpChange, len(changes))
	for i, c := range changes {
		pbs[i] = &pb.OpChange{From: string(c.From), Op: opToPB(c.Op)}
		if err := checkChange(pbs[i]); err != nil {
			return nil, fmt.Errorf("raftbuffer: %s: change %d: %w", op, i, err)
		}
	}
	if err := n.checkLeader(op); err != nil {
		return nil, err
	}
	var cmds [][]byte
	var counts []int
	var batch []*pb.OpChange
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		c, err := encodePutOps(batch)
		if err != nil {
			return fmt.Errorf("raftbuffer: %s: %w", op, err)
		}
		cmds, counts = append(cmds, c), append(counts, len(batch))
		batch, size = nil, 0
		return nil
	}
	for _, c := range pbs {
		sz := proto.Size(c) + 8
		if size+sz > maxCommandBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		batch = append(batch, c)
		size += sz
	}
	if err := flush(); err != nil {
		return nil, err
	}
	answers, err := n.applyAll(ctx, op, cmds)
	if err != nil {
		return nil, err
	}
	applied := make([]bool, 0, len(changes))
	for i, a := range answers {
		flags, ok := a.([]bool)
		if !ok || len(flags) != counts[i] {
			return nil, fmt.Errorf("raftbuffer: %s: command %d answered %T", op, i, a)
		}
		applied = append(applied, flags...)
	}
	return applied, nil
}

// Get returns one operation from this node's copy, or an error wrapping
// ports.ErrNotFound.
func (n *Node) Get(ctx context.Context, id string) (ports.Operation, error) {
	if err := ctx.Err(); err != nil {
		return ports.Operation{}, fmt.Errorf("raftbuffer: get operation: %w", err)
	}
	if err := n.fresh("get operation"); err != nil {
		return ports.Operation{}, err
	}
	op, err := n.fsm.getOp(id)
	if err != nil {
		return ports.Operation{}, fmt.Errorf("raftbuffer: get operation: %w", err)
	}
	return op, nil
}

// Due returns up to limit Pending or Retrying operations due at or before
// now, earliest first, then by id, from this node's copy: a walk of the
// due index, which holds no other status. A limit below 1 is
// ports.ErrInvalid.
func (n *Node) Due(ctx context.Context, now time.Time, limit int) ([]ports.Operation, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raftbuffer: due operations: %w", err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("raftbuffer: due operations: limit %d is below 1: %w", limit, ports.ErrInvalid)
	}
	if err := n.fresh("due operations"); err != nil {
		return nil, err
	}
	out, err := n.fsm.dueOps(now, limit)
	if err != nil {
		return nil, fmt.Errorf("raftbuffer: due operations: %w", err)
	}
	return out, nil
}

// List returns one page of operations matching f, newest first, from this
// node's copy. The cursor is the created index key of the previous page's
// last item; one that is not is ports.ErrInvalid, as is a limit below 1.
func (n *Node) List(ctx context.Context, f ports.OpFilter, page ports.PageRequest) (ports.OpPage, error) {
	if err := ctx.Err(); err != nil {
		return ports.OpPage{}, fmt.Errorf("raftbuffer: list operations: %w", err)
	}
	if page.Limit < 1 {
		return ports.OpPage{}, fmt.Errorf("raftbuffer: list operations: limit %d is below 1: %w", page.Limit, ports.ErrInvalid)
	}
	var after []byte
	if page.After != "" {
		var err error
		if after, err = decodeOpCursor(page.After); err != nil {
			return ports.OpPage{}, fmt.Errorf("raftbuffer: list operations: %w", err)
		}
	}
	if err := n.fresh("list operations"); err != nil {
		return ports.OpPage{}, err
	}
	out, err := n.fsm.listOps(f, page.Limit, after)
	if err != nil {
		return ports.OpPage{}, fmt.Errorf("raftbuffer: list operations: %w", err)
	}
	return out, nil
}

// Purge commits the removal of up to limit terminal operations whose
// TerminalAt is before cutoff, oldest first: one command carrying the
// cutoff and the limit (at most 10,000; the caller purges again), applied
// alike on every node. A limit below 1 is ports.ErrInvalid; errors
// otherwise as for Put.
func (n *Node) Purge(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	const op = "purge operations"
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("raftbuffer: %s: %w", op, err)
	}
	if limit < 1 {
		return 0, fmt.Errorf("raftbuffer: %s: limit %d is below 1: %w", op, limit, ports.ErrInvalid)
	}
	if err := n.checkLeader(op); err != nil {
		return 0, err
	}
	cmd, err := encodePurgeOps(timeToPB(cutoff), uint32(min(limit, maxPurgeOps)))
	if err != nil {
		return 0, fmt.Errorf("raftbuffer: %s: %w", op, err)
	}
	answers, err := n.applyAll(ctx, op, [][]byte{cmd})
	if err != nil {
		return 0, err
	}
	removed, ok := answers[0].(int)
	if !ok {
		return 0, fmt.Errorf("raftbuffer: %s: the command answered %T", op, answers[0])
	}
	return removed, nil
}

// OpStats counts this node's operations by kind and status, from counts
// kept beside the rows, and the oldest buffered one from the first key of
// the buffered index: no scan.
func (n *Node) OpStats(ctx context.Context) (ports.OpStats, error) {
	if err := ctx.Err(); err != nil {
		return ports.OpStats{}, fmt.Errorf("raftbuffer: operation stats: %w", err)
	}
	if err := n.fresh("operation stats"); err != nil {
		return ports.OpStats{}, err
	}
	out, err := n.fsm.opStats()
	if err != nil {
		return ports.OpStats{}, fmt.Errorf("raftbuffer: operation stats: %w", err)
	}
	return out, nil
}

// Changes reads this node's change feed: up to limit operations after the
// position after, in the order of their last change. A position is the
// Raft log index of the entry that last changed the row and its id, so
// every node that applied the same log answers the same; rows stored
// before the feed existed have index 0 and come first. A position that is
// not one, or a limit below 1, is ports.ErrInvalid.
func (n *Node) Changes(ctx context.Context, after string, limit int) (ports.OpChanges, error) {
	const op = "operation changes"
	if err := ctx.Err(); err != nil {
		return ports.OpChanges{}, fmt.Errorf("raftbuffer: %s: %w", op, err)
	}
	if limit < 1 {
		return ports.OpChanges{}, fmt.Errorf("raftbuffer: %s: limit %d is below 1: %w", op, limit, ports.ErrInvalid)
	}
	var pos []byte
	if after != "" {
		var err error
		if pos, err = decodePosition(after); err != nil {
			return ports.OpChanges{}, fmt.Errorf("raftbuffer: %s: %w", op, err)
		}
	}
	if err := n.fresh(op); err != nil {
		return ports.OpChanges{}, err
	}
	out, err := n.fsm.changes(pos, limit)
	if err != nil {
		return ports.OpChanges{}, fmt.Errorf("raftbuffer: %s: %w", op, err)
	}
	return out, nil
}
