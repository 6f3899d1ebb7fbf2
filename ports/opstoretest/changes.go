package opstoretest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// feedEntry is one item of the change feed as the suite compares it: the
// row's id and version, and the position its page ended at when it was
// the page's last item.
type feedEntry struct {
	ID      string
	Version uint64
}

// readFeed reads the whole feed of s after the position after, in pages of
// page, and returns its entries, the positions each page ended at, the
// last Next and the epoch. Every page must carry the same epoch, hold no
// more than page items, each whole with its times in UTC, and an empty
// page must hand back the position it was asked for.
func readFeed(t *testing.T, s ports.OpStore, after string, page int) (entries []feedEntry, nexts []string, last, epoch string) {
	t.Helper()
	for i := 0; ; i++ {
		c, err := s.Changes(t.Context(), after, page)
		if err != nil {
			t.Fatalf("Changes(%q, %d): %v", after, page, err)
		}
		if i > 0 && c.Epoch != epoch {
			t.Fatalf("page %d of the feed has epoch %q, the first %q", i, c.Epoch, epoch)
		}
		epoch = c.Epoch
		if len(c.Items) > page {
			t.Fatalf("Changes(%q, %d) returned %d items", after, page, len(c.Items))
		}
		if len(c.Items) == 0 {
			if c.Next != after {
				t.Fatalf("an empty page after %q has Next %q, want the position asked for", after, c.Next)
			}
			return entries, nexts, c.Next, epoch
		}
		for _, op := range c.Items {
			if d := utcTimes(op); len(d) > 0 {
				t.Fatalf("Changes: %s: %v", op.ID, d)
			}
			entries = append(entries, feedEntry{op.ID, op.Version})
		}
		if c.Next == "" || c.Next == after {
			t.Fatalf("a page of %d items after %q has Next %q", len(c.Items), after, c.Next)
		}
		nexts = append(nexts, c.Next)
		after = c.Next
	}
}

// feedIDs returns the ids of entries.
func feedIDs(entries []feedEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// sameSet reports whether a and b hold the same ids, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func exerciseChanges(t *testing.T, h Harness) {
	open := h.Open
	t.Run("EmptyStore", func(t *testing.T) {
		s := open(t)
		c, err := s.Changes(t.Context(), "", 10)
		if err != nil || len(c.Items) != 0 || c.Next != "" || c.Epoch != "" {
			t.Fatalf("Changes of an empty store = %+v, %v; want nothing, no position, no epoch", c, err)
		}
	})

	t.Run("Refusals", func(t *testing.T) {
		s := open(t)
		insert(t, s, NewCall(BaseTime))
		for _, limit := range []int{0, -1} {
			if _, err := s.Changes(t.Context(), "", limit); !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Changes with limit %d: %v, want ErrInvalid", limit, err)
			}
		}
		for _, p := range []string{"!!", "AAAA", "not a position", strings.Repeat("A", 5000)} {
			if _, err := s.Changes(t.Context(), p, 10); !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Changes after %.20q: %v, want ErrInvalid", p, err)
			}
		}
		if _, err := s.Changes(cancelled(t), "", 10); err == nil {
			t.Fatalf("Changes with a cancelled context succeeded")
		}
	})

	t.Run("OrderOfLastChangeEachRowOnce", func(t *testing.T) {
		s := open(t)
		a, b, c := NewCall(BaseTime), NewWrite(BaseTime.Add(time.Second)), NewCall(BaseTime.Add(-time.Hour))
		insert(t, s, a)
		insert(t, s, b)
		insert(t, s, c)
		entries, nexts, _, epoch := readFeed(t, s, "", 1)
		if want := []string{a.ID, b.ID, c.ID}; !slices.Equal(feedIDs(entries), want) {
			t.Fatalf("feed = %v, want %v (in the order of the changes, not of CreatedAt)", feedIDs(entries), want)
		}
		if epoch == "" {
			t.Fatalf("the feed of a store holding rows has no epoch")
		}
		afterC := nexts[2]

		// a changes twice, b once more: each appears once, at its last
		// change; a change that does not apply moves nothing.
		ar := a
		ar.Status, ar.RetryCount = ports.OpRetrying, 1
		ap := ar
		ap.Status = ports.OpParked
		put(t, s, []bool{true}, Move(ports.OpPending, ar))
		bd := b
		bd.Status, bd.TerminalAt = ports.OpDelivered, BaseTime.Add(time.Minute)
		put(t, s, []bool{true}, Move(ports.OpPending, bd))
		put(t, s, []bool{true, false}, Move(ports.OpRetrying, ap), Move(ports.OpRetrying, c))
		want := []feedEntry{{c.ID, 1}, {b.ID, 2}, {a.ID, 3}}
		for _, page := range []int{1, 2, 3, 100} {
			got, _, _, e := readFeed(t, s, "", page)
			if !slices.Equal(got, want) {
				t.Fatalf("feed in pages of %d = %v, want %v", page, got, want)
			}
			if e != epoch {
				t.Fatalf("the epoch moved from %q to %q when rows changed", epoch, e)
			}
		}
		// A reader that had read up to c reads what changed since.
		got, _, last, _ := readFeed(t, s, afterC, 2)
		if w := []feedEntry{{b.ID, 2}, {a.ID, 3}}; !slices.Equal(got, w) {
			t.Fatalf("feed after the old position of c = %v, want %v", got, w)
		}
		// The rows come whole, as Get returns them.
		cs, err := s.Changes(t.Context(), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range cs.Items {
			if d := DiffOperation(get(t, s, op.ID), op); len(d) > 0 {
				t.Fatalf("feed row %s differs from Get: %v", op.ID, d)
			}
		}
		// Nothing after the end, until something changes.
		if got, _, end, _ := readFeed(t, s, last, 5); len(got) != 0 || end != last {
			t.Fatalf("feed after its end = %v, Next %q", got, end)
		}
		d := NewWrite(BaseTime)
		insert(t, s, d)
		if got, _, _, _ := readFeed(t, s, last, 5); !slices.Equal(got, []feedEntry{{d.ID, 1}}) {
			t.Fatalf("feed after its end once d is stored = %v, want [%s]", got, d.ID)
		}
	})

	t.Run("ChangesOfOnePut", func(t *testing.T) {
		s := open(t)
		first := NewCall(BaseTime)
		insert(t, s, first)
		x, y := NewCall(BaseTime), NewWrite(BaseTime)
		xr := x
		xr.Status = ports.OpRetrying
		put(t, s, []bool{true, true, true}, Insert(x), Insert(y), Move(ports.OpPending, xr))
		got, _, _, _ := readFeed(t, s, "", 1)
		if len(got) != 3 || got[0] != (feedEntry{first.ID, 1}) || !sameSet(feedIDs(got[1:]), []string{x.ID, y.ID}) {
			t.Fatalf("feed = %v, want %s then x and y once each", got, first.ID)
		}
		for _, e := range got {
			if e.ID == x.ID && e.Version != 2 {
				t.Fatalf("x appears at version %d, want its last change, 2", e.Version)
			}
		}
	})

	t.Run("PurgedRowsLeave", func(t *testing.T) {
		s := open(t)
		cutoff := BaseTime.Add(time.Hour)
		done := func(op ports.Operation, at time.Time) ports.Operation {
			op.Status, op.TerminalAt = ports.OpDelivered, at.In(zone)
			return op
		}
		oldA, keep, oldB := done(NewCall(BaseTime), BaseTime), NewWrite(BaseTime), done(NewCall(BaseTime), BaseTime)
		recent := done(NewWrite(BaseTime), cutoff.Add(time.Minute))
		insert(t, s, oldA)
		insert(t, s, keep)
		insert(t, s, oldB)
		insert(t, s, recent)
		_, nexts, _, epoch := readFeed(t, s, "", 1)
		if n, err := s.Purge(t.Context(), cutoff, 10); err != nil || n != 2 {
			t.Fatalf("Purge = %d, %v; want 2", n, err)
		}
		got, _, _, e := readFeed(t, s, "", 1)
		if w := []feedEntry{{keep.ID, 1}, {recent.ID, 1}}; !slices.Equal(got, w) {
			t.Fatalf("feed after the purge = %v, want %v", got, w)
		}
		if e != epoch {
			t.Fatalf("the purge moved the epoch from %q to %q", epoch, e)
		}
		// A position taken before the purge, even a purged row's, still
		// reads on from where it was.
		if got, _, _, _ := readFeed(t, s, nexts[0], 10); !slices.Equal(feedIDs(got), []string{keep.ID, recent.ID}) {
			t.Fatalf("feed after the purged first row = %v", feedIDs(got))
		}
		if got, _, _, _ := readFeed(t, s, nexts[2], 10); !slices.Equal(feedIDs(got), []string{recent.ID}) {
			t.Fatalf("feed after the purged third row = %v", feedIDs(got))
		}
		// Every row purged: the feed is empty, the epoch stays.
		rd := done(keep, cutoff.Add(-time.Minute))
		put(t, s, []bool{true}, Move(ports.OpPending, rd))
		if n, err := s.Purge(t.Context(), cutoff.Add(time.Hour), 10); err != nil || n != 2 {
			t.Fatalf("second Purge = %d, %v; want 2", n, err)
		}
		got, _, _, e = readFeed(t, s, "", 10)
		if len(got) != 0 || e != epoch {
			t.Fatalf("feed of a store whose rows were all purged = %v, epoch %q; want none, epoch %q", got, e, epoch)
		}
	})

	t.Run("EpochDiffersBetweenStores", func(t *testing.T) {
		one, two := open(t), open(t)
		op := NewCall(BaseTime)
		insert(t, one, op)
		insert(t, two, op) // even the same first row
		a, _ := one.Changes(t.Context(), "", 1)
		b, _ := two.Changes(t.Context(), "", 1)
		if a.Epoch == "" || a.Epoch == b.Epoch {
			t.Fatalf("two stores have epochs %q and %q; want two different ones", a.Epoch, b.Epoch)
		}
	})

	t.Run("EveryCopyAgrees", func(t *testing.T) {
		if h.Replicas == nil {
			t.Skip("the implementation keeps one copy")
		}
		s := open(t)
		var ops []ports.Operation
		for i := range 6 {
			op := NewCall(BaseTime.Add(time.Duration(i) * time.Second))
			ops = append(ops, op)
			insert(t, s, op)
		}
		r := ops[1]
		r.Status = ports.OpRetrying
		p := ops[4]
		p.Status = ports.OpParked
		put(t, s, []bool{true, true}, Move(ports.OpPending, r), Move(ports.OpPending, p))
		d := ops[0]
		d.Status, d.TerminalAt = ports.OpDelivered, BaseTime
		put(t, s, []bool{true}, Move(ports.OpPending, d))
		if n, err := s.Purge(t.Context(), BaseTime.Add(time.Second), 10); err != nil || n != 1 {
			t.Fatalf("Purge = %d, %v; want 1", n, err)
		}
		want, wantNexts, _, wantEpoch := readFeed(t, s, "", 2)
		copies := h.Replicas(t, s)
		if len(copies) < 2 {
			t.Fatalf("Replicas returned %d copies", len(copies))
		}
		for i, c := range copies {
			got, nexts, _, epoch := readFeed(t, c, "", 2)
			if !slices.Equal(got, want) || !slices.Equal(nexts, wantNexts) || epoch != wantEpoch {
				t.Fatalf("copy %d: feed %v, positions %v, epoch %q;\nthe store's: %v, %v, %q",
					i, got, nexts, epoch, want, wantNexts, wantEpoch)
			}
			// A position read on one copy reads on on another.
			mid, _, _, _ := readFeed(t, c, wantNexts[0], 3)
			if !slices.Equal(mid, want[2:]) {
				t.Fatalf("copy %d after the store's first position: %v, want %v", i, mid, want[2:])
			}
		}
	})
}

// String makes a feed entry readable in messages.
func (e feedEntry) String() string { return fmt.Sprintf("%s@v%d", e.ID, e.Version) }
