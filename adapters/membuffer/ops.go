package membuffer

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// Ops is an in-memory ports.OpStore for the core's unit tests: one mutex,
// no replication, always the leader. The zero value is not usable; call
// [NewOps].
type Ops struct {
	mu          sync.Mutex
	unavailable bool
	ops         map[string]ports.Operation
	// changed is the position of each row's last change: the count of
	// changes applied when it was made. epoch is set when the first row is
	// stored.
	changed map[string]uint64
	changes uint64
	epoch   string
}

var _ ports.OpStore = (*Ops)(nil)

// NewOps returns an empty store.
func NewOps() *Ops {
	return &Ops{ops: make(map[string]ports.Operation), changed: make(map[string]uint64)}
}

// SetAvailable makes writes succeed (true, the default) or fail with an
// error wrapping ports.ErrUnavailable (false), as on a node that cannot
// commit. Reads keep answering.
func (s *Ops) SetAvailable(ok bool) {
	s.mu.Lock()
	s.unavailable = !ok
	s.mu.Unlock()
}

// Put implements ports.OpStore.
func (s *Ops) Put(ctx context.Context, changes []ports.OpChange) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("membuffer: put operations: %w", err)
	}
	for i, c := range changes {
		if err := checkChange(c); err != nil {
			return nil, fmt.Errorf("membuffer: put operations: change %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable {
		return nil, fmt.Errorf("membuffer: put operations: %w", ports.ErrUnavailable)
	}
	applied := make([]bool, len(changes))
	for i, c := range changes {
		old, ok := s.ops[c.Op.ID]
		if (ok && old.Status != c.From) || (!ok && c.From != "") {
			continue
		}
		op := cloneOp(c.Op)
		op.Version = old.Version + 1
		if op.Status.Terminal() {
			op.Payload = ports.OpPayload{}
		}
		s.ops[op.ID] = op
		s.changes++
		s.changed[op.ID] = s.changes
		if s.epoch == "" {
			s.epoch = uuid.NewString()
		}
		applied[i] = true
	}
	return applied, nil
}

// checkChange refuses a change no store keeps: an empty id, an unknown
// kind, status or from-status.
func checkChange(c ports.OpChange) error {
	switch {
	case c.Op.ID == "":
		return fmt.Errorf("empty id: %w", ports.ErrInvalid)
	case c.Op.Kind != ports.OpCall && c.Op.Kind != ports.OpWrite:
		return fmt.Errorf("unknown kind %q: %w", c.Op.Kind, ports.ErrInvalid)
	case !c.Op.Status.Valid():
		return fmt.Errorf("unknown status %q: %w", c.Op.Status, ports.ErrInvalid)
	case c.From != "" && !c.From.Valid():
		return fmt.Errorf("unknown from-status %q: %w", c.From, ports.ErrInvalid)
	}
	return nil
}

// Get implements ports.OpStore.
func (s *Ops) Get(ctx context.Context, id string) (ports.Operation, error) {
	if err := ctx.Err(); err != nil {
		return ports.Operation{}, fmt.Errorf("membuffer: get operation: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	op, ok := s.ops[id]
	if !ok {
		return ports.Operation{}, fmt.Errorf("membuffer: operation %s: %w", id, ports.ErrNotFound)
	}
	return cloneOp(op), nil
}

// Due implements ports.OpStore.
func (s *Ops) Due(ctx context.Context, now time.Time, limit int) ([]ports.Operation, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("membuffer: due operations: %w", err)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("membuffer: due operations: limit %d: %w", limit, ports.ErrInvalid)
	}
	s.mu.Lock()
	var out []ports.Operation
	for _, op := range s.ops {
		if (op.Status == ports.OpPending || op.Status == ports.OpRetrying) && !op.NextAttemptAt.After(now) {
			out = append(out, cloneOp(op))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ports.Operation) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), strings.Compare(a.ID, b.ID))
	})
	return out[:min(limit, len(out))], nil
}

// List implements ports.OpStore. Its cursor is the last item's CreatedAt and
// ID.
func (s *Ops) List(ctx context.Context, f ports.OpFilter, page ports.PageRequest) (ports.OpPage, error) {
	if err := ctx.Err(); err != nil {
		return ports.OpPage{}, fmt.Errorf("membuffer: list operations: %w", err)
	}
	if page.Limit <= 0 {
		return ports.OpPage{}, fmt.Errorf("membuffer: list operations: limit %d: %w", page.Limit, ports.ErrInvalid)
	}
	var after *ports.Operation
	if page.After != "" {
		at, id, err := decodeOpCursor(page.After)
		if err != nil {
			return ports.OpPage{}, fmt.Errorf("membuffer: list operations: %w", err)
		}
		after = &ports.Operation{ID: id, CreatedAt: at}
	}
	s.mu.Lock()
	var items []ports.Operation
	for _, op := range s.ops {
		if opMatches(op, f) && (after == nil || newestFirst(op, *after) > 0) {
			items = append(items, cloneOp(op))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(items, newestFirst)
	var next string
	if len(items) > page.Limit {
		items = items[:page.Limit]
		last := items[len(items)-1]
		next = encodeOpCursor(last.CreatedAt, last.ID)
	}
	return ports.OpPage{Items: items, Next: next}, nil
}

// newestFirst orders operations by CreatedAt descending, then ID descending.
func newestFirst(a, b ports.Operation) int {
	return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
}

func opMatches(op ports.Operation, f ports.OpFilter) bool {
	return (f.Kind == "" || op.Kind == f.Kind) &&
		(len(f.Statuses) == 0 || slices.Contains(f.Statuses, op.Status)) &&
		(f.Target == "" || op.Target == f.Target) &&
		(f.CreatedFrom.IsZero() || !op.CreatedAt.Before(f.CreatedFrom)) &&
		(f.CreatedTo.IsZero() || op.CreatedAt.Before(f.CreatedTo))
}

func encodeOpCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%s", at.UnixMicro(), id))
}

func decodeOpCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("malformed cursor: %w", ports.ErrInvalid)
	}
	var us int64
	var id string
	if n, err := fmt.Sscanf(string(b), "%d/%s", &us, &id); err != nil || n != 2 {
		return time.Time{}, "", fmt.Errorf("malformed cursor: %w", ports.ErrInvalid)
	}
	return time.UnixMicro(us).UTC(), id, nil
}

// Purge implements ports.OpStore.
func (s *Ops) Purge(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("membuffer: purge operations: %w", err)
	}
	if limit <= 0 {
		return 0, fmt.Errorf("membuffer: purge operations: limit %d: %w", limit, ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable {
		return 0, fmt.Errorf("membuffer: purge operations: %w", ports.ErrUnavailable)
	}
	var old []ports.Operation
	for _, op := range s.ops {
		if op.Status.Terminal() && op.TerminalAt.Before(cutoff) {
			old = append(old, op)
		}
	}
	slices.SortFunc(old, func(a, b ports.Operation) int {
		return cmp.Or(a.TerminalAt.Compare(b.TerminalAt), strings.Compare(a.ID, b.ID))
	})
	n := min(limit, len(old))
	for _, op := range old[:n] {
		delete(s.ops, op.ID)
		delete(s.changed, op.ID)
	}
	return n, nil
}

// OpStats implements ports.OpStore.
func (s *Ops) OpStats(ctx context.Context) (ports.OpStats, error) {
	if err := ctx.Err(); err != nil {
		return ports.OpStats{}, fmt.Errorf("membuffer: operation stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kinds := map[ports.OpKind]*ports.OpKindStats{}
	for _, k := range []ports.OpKind{ports.OpCall, ports.OpWrite} {
		kinds[k] = &ports.OpKindStats{Kind: k}
	}
	for _, op := range s.ops {
		k, ok := kinds[op.Kind]
		if !ok {
			k = &ports.OpKindStats{Kind: op.Kind}
			kinds[op.Kind] = k
		}
		switch {
		case op.Status.Terminal():
			k.Terminal++
		case op.Status == ports.OpParked:
			k.Parked++
		default:
			k.Backlog++
		}
		if op.Status.Buffered() && (k.OldestBufferedAt.IsZero() || op.CreatedAt.Before(k.OldestBufferedAt)) {
			k.OldestBufferedAt = op.CreatedAt
		}
	}
	var out ports.OpStats
	for _, k := range kinds {
		out.Kinds = append(out.Kinds, *k)
	}
	slices.SortFunc(out.Kinds, func(a, b ports.OpKindStats) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
	return out, nil
}

// cloneOp is a deep copy of op with its times in UTC.
func cloneOp(op ports.Operation) ports.Operation {
	op.Payload.Params = slices.Clone(op.Payload.Params)
	op.Payload.Args = slices.Clone(op.Payload.Args)
	for _, t := range []*time.Time{&op.NextAttemptAt, &op.CreatedAt, &op.UpdatedAt, &op.TerminalAt} {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	return op
}

// Changes implements ports.OpStore. A position is the count of changes the
// store had applied when it made the row's last change, in unpadded
// URL-safe base64; the epoch is a random UUID drawn when the first row is
// stored.
func (s *Ops) Changes(ctx context.Context, after string, limit int) (ports.OpChanges, error) {
	if err := ctx.Err(); err != nil {
		return ports.OpChanges{}, fmt.Errorf("membuffer: operation changes: %w", err)
	}
	if limit <= 0 {
		return ports.OpChanges{}, fmt.Errorf("membuffer: operation changes: limit %d: %w", limit, ports.ErrInvalid)
	}
	var from uint64
	if after != "" {
		b, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || len(b) != 8 {
			return ports.OpChanges{}, fmt.Errorf("membuffer: operation changes: malformed position: %w", ports.ErrInvalid)
		}
		from = binary.BigEndian.Uint64(b)
	}
	s.mu.Lock()
	out := ports.OpChanges{Next: after, Epoch: s.epoch}
	var items []ports.Operation
	for id, at := range s.changed {
		if at > from {
			items = append(items, cloneOp(s.ops[id]))
		}
	}
	slices.SortFunc(items, func(a, b ports.Operation) int { return cmp.Compare(s.changed[a.ID], s.changed[b.ID]) })
	if len(items) > limit {
		items = items[:limit]
	}
	if len(items) > 0 {
		out.Next = base64.RawURLEncoding.EncodeToString(binary.BigEndian.AppendUint64(nil, s.changed[items[len(items)-1].ID]))
	}
	s.mu.Unlock()
	out.Items = items
	return out, nil
}
