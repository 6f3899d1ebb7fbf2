package opstoretest

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// due calls Due and returns the ids, checking every row is whole.
func due(t *testing.T, s ports.OpStore, now time.Time, limit int) []string {
	t.Helper()
	ops, err := s.Due(t.Context(), now, limit)
	if err != nil {
		t.Fatalf("Due(%s, %d): %v", fmtTime(now), limit, err)
	}
	for _, op := range ops {
		if d := utcTimes(op); len(d) > 0 {
			t.Fatalf("Due: %s: %v", op.ID, d)
		}
	}
	return idList(ops)
}

func exerciseDue(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("PendingAndRetryingDueByNow", func(t *testing.T) {
		s := open(t)
		now := BaseTime.Add(time.Hour)
		at := func(op ports.Operation, st ports.OpStatus, next time.Time) ports.Operation {
			op.Status, op.NextAttemptAt = st, next.In(zone)
			if st.Terminal() {
				op.TerminalAt = now.Add(-time.Minute)
			}
			return op
		}
		early := at(NewCall(BaseTime), ports.OpRetrying, now.Add(-time.Hour))
		mid := at(NewWrite(BaseTime), ports.OpPending, now.Add(-time.Minute))
		// Two due at the same instant: the lower id first.
		tieA := at(NewCall(BaseTime), ports.OpPending, now.Add(-time.Second))
		tieB := at(NewCall(BaseTime), ports.OpRetrying, now.Add(-time.Second))
		if tieA.ID > tieB.ID {
			tieA, tieB = tieB, tieA
		}
		exact := at(NewCall(BaseTime), ports.OpRetrying, now)
		later := at(NewCall(BaseTime), ports.OpPending, now.Add(time.Microsecond))
		parked := at(NewCall(BaseTime), ports.OpParked, now.Add(-2*time.Hour))
		delivered := at(NewCall(BaseTime), ports.OpDelivered, now.Add(-2*time.Hour))
		failed := at(NewWrite(BaseTime), ports.OpFailed, now.Add(-2*time.Hour))
		discarded := at(NewWrite(BaseTime), ports.OpDiscarded, now.Add(-2*time.Hour))
		insert(t, s, later, tieB, discarded, exact, parked, mid, failed, tieA, delivered, early)

		want := []string{early.ID, mid.ID, tieA.ID, tieB.ID, exact.ID}
		if got := due(t, s, now, 100); !slices.Equal(got, want) {
			t.Fatalf("Due(now) = %v, want %v (earliest first, then id; never Parked, terminal or later)", got, want)
		}
		if got := due(t, s, now, 3); !slices.Equal(got, want[:3]) {
			t.Fatalf("Due(now, 3) = %v, want %v", got, want[:3])
		}
		if got := due(t, s, now.Add(time.Microsecond), 100); !slices.Equal(got, append(want, later.ID)) {
			t.Fatalf("Due(now+1µs) = %v, want %v", got, append(want, later.ID))
		}
		if got := due(t, s, early.NextAttemptAt.Add(-time.Microsecond), 100); len(got) != 0 {
			t.Fatalf("Due before the earliest = %v, want nothing", got)
		}
		ops, err := s.Due(t.Context(), now, 1)
		if err != nil || len(ops) != 1 {
			t.Fatalf("Due(now, 1) = %d, %v", len(ops), err)
		}
		if d := DiffOperation(stored(early, 1), ops[0]); len(d) > 0 {
			t.Fatalf("Due returns the row altered: %v", d)
		}
	})

	t.Run("FollowsChanges", func(t *testing.T) {
		s := open(t)
		now := BaseTime.Add(time.Hour)
		a, b := NewCall(BaseTime), NewWrite(BaseTime)
		a.NextAttemptAt, b.NextAttemptAt = now.Add(-time.Minute), now.Add(-time.Second)
		insert(t, s, a, b)
		if got := due(t, s, now, 10); !slices.Equal(got, []string{a.ID, b.ID}) {
			t.Fatalf("Due = %v, want [a b]", got)
		}
		// a is retried later: it moves behind b, then out of reach.
		a2 := a
		a2.Status, a2.NextAttemptAt = ports.OpRetrying, now.Add(-time.Millisecond)
		put(t, s, []bool{true}, Move(ports.OpPending, a2))
		if got := due(t, s, now, 10); !slices.Equal(got, []string{b.ID, a.ID}) {
			t.Fatalf("Due after a moved = %v, want [b a]", got)
		}
		a3 := a2
		a3.NextAttemptAt = now.Add(time.Hour)
		put(t, s, []bool{true}, Move(ports.OpRetrying, a3))
		if got := due(t, s, now, 10); !slices.Equal(got, []string{b.ID}) {
			t.Fatalf("Due after a went later = %v, want [b]", got)
		}
		// b parks: no longer due; an operator's Retry brings it back.
		bp := b
		bp.Status = ports.OpParked
		put(t, s, []bool{true}, Move(ports.OpPending, bp))
		if got := due(t, s, now, 10); len(got) != 0 {
			t.Fatalf("Due after b parked = %v, want nothing", got)
		}
		br := bp
		br.Status, br.RetryCount, br.NextAttemptAt = ports.OpRetrying, 0, now
		put(t, s, []bool{true}, Move(ports.OpParked, br))
		if got := due(t, s, now, 10); !slices.Equal(got, []string{b.ID}) {
			t.Fatalf("Due after b was retried = %v, want [b]", got)
		}
		// Delivered: never due again.
		bd := br
		bd.Status, bd.TerminalAt = ports.OpDelivered, now
		put(t, s, []bool{true}, Move(ports.OpRetrying, bd))
		if got := due(t, s, now.Add(24*time.Hour), 10); !slices.Equal(got, []string{a.ID}) {
			t.Fatalf("Due after b was delivered = %v, want [a]", got)
		}
	})

	t.Run("LimitBelowOneIsInvalid", func(t *testing.T) {
		s := open(t)
		if _, err := s.Due(t.Context(), BaseTime, 0); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Due with limit 0: err = %v, want one wrapping ErrInvalid", err)
		}
	})
}

// listAll reads every page of f with pages of size page, checking that no
// page is longer than asked and that only the last one has no Next.
func listAll(t *testing.T, s ports.OpStore, f ports.OpFilter, page int) []string {
	t.Helper()
	var all []string
	req := ports.PageRequest{Limit: page}
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatalf("List never ends: %d pages", i)
		}
		p, err := s.List(t.Context(), f, req)
		if err != nil {
			t.Fatalf("List(%+v, %+v): %v", f, req, err)
		}
		if len(p.Items) > page {
			t.Fatalf("List(limit %d) returned %d items", page, len(p.Items))
		}
		if p.Next != "" && len(p.Items) == 0 {
			t.Fatalf("List returned an empty page with a Next cursor")
		}
		for _, op := range p.Items {
			if d := utcTimes(op); len(d) > 0 {
				t.Fatalf("List: %s: %v", op.ID, d)
			}
		}
		all = append(all, idList(p.Items)...)
		if p.Next == "" {
			return all
		}
		req.After = p.Next
	}
}

// newestFirst sorts ops as List returns them and returns their ids.
func newestFirst(ops []ports.Operation) []string {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b ports.Operation) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return idList(ops)
}

func exerciseList(t *testing.T, open func(t *testing.T) ports.OpStore) {
	t.Run("NewestFirstPagedThroughTies", func(t *testing.T) {
		s := open(t)
		// 23 operations over 6 instants, up to 5 sharing one CreatedAt.
		var ops []ports.Operation
		for i := range 23 {
			op := NewCall(BaseTime.Add(time.Duration(i/4) * time.Microsecond))
			if i%3 == 0 {
				op = NewWrite(BaseTime.Add(time.Duration(i/4) * time.Microsecond))
			}
			ops = append(ops, op)
		}
		insert(t, s, ops[:11]...)
		insert(t, s, ops[11:]...)
		want := newestFirst(ops)
		for _, page := range []int{1, 4, 5, 23, 100} {
			if got := listAll(t, s, ports.OpFilter{}, page); !slices.Equal(got, want) {
				t.Fatalf("List in pages of %d:\n got %v\nwant %v", page, got, want)
			}
		}
		p, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{Limit: 23})
		if err != nil || p.Next != "" {
			t.Fatalf("a page holding the last item has Next %q, %v; want none", p.Next, err)
		}
		if err == nil {
			for _, op := range p.Items {
				for _, w := range ops {
					if w.ID == op.ID {
						if d := DiffOperation(stored(w, 1), op); len(d) > 0 {
							t.Fatalf("List returns %s altered: %v", op.ID, d)
						}
					}
				}
			}
		}
	})

	t.Run("Filters", func(t *testing.T) {
		s := open(t)
		mk := func(op ports.Operation, st ports.OpStatus, target string) ports.Operation {
			op.Status, op.Target = st, target
			if st.Terminal() {
				op.TerminalAt = op.CreatedAt
			}
			return op
		}
		t0 := BaseTime
		ops := []ports.Operation{
			mk(NewCall(t0), ports.OpPending, "erp"),
			mk(NewCall(t0.Add(time.Second)), ports.OpParked, "erp"),
			mk(NewCall(t0.Add(2*time.Second)), ports.OpDelivered, "historian"),
			mk(NewWrite(t0.Add(3*time.Second)), ports.OpRetrying, "plantdb"),
			mk(NewWrite(t0.Add(4*time.Second)), ports.OpFailed, "plantdb"),
			mk(NewWrite(t0.Add(5*time.Second)), ports.OpParked, "erp"),
			mk(NewCall(t0.Add(6*time.Second)), ports.OpDiscarded, "erp"),
		}
		insert(t, s, ops...)
		pick := func(idx ...int) []string {
			var sel []ports.Operation
			for _, i := range idx {
				sel = append(sel, ops[i])
			}
			return newestFirst(sel)
		}
		for name, c := range map[string]struct {
			f    ports.OpFilter
			want []string
		}{
			"none":             {ports.OpFilter{}, pick(0, 1, 2, 3, 4, 5, 6)},
			"kind call":        {ports.OpFilter{Kind: ports.OpCall}, pick(0, 1, 2, 6)},
			"kind write":       {ports.OpFilter{Kind: ports.OpWrite}, pick(3, 4, 5)},
			"one status":       {ports.OpFilter{Statuses: []ports.OpStatus{ports.OpParked}}, pick(1, 5)},
			"statuses":         {ports.OpFilter{Statuses: []ports.OpStatus{ports.OpPending, ports.OpFailed, ports.OpDiscarded}}, pick(0, 4, 6)},
			"target":           {ports.OpFilter{Target: "erp"}, pick(0, 1, 5, 6)},
			"target unknown":   {ports.OpFilter{Target: "nowhere"}, nil},
			"from inclusive":   {ports.OpFilter{CreatedFrom: ops[4].CreatedAt}, pick(4, 5, 6)},
			"to exclusive":     {ports.OpFilter{CreatedTo: ops[2].CreatedAt}, pick(0, 1)},
			"range":            {ports.OpFilter{CreatedFrom: ops[1].CreatedAt, CreatedTo: ops[5].CreatedAt.Add(time.Microsecond)}, pick(1, 2, 3, 4, 5)},
			"empty range":      {ports.OpFilter{CreatedFrom: ops[3].CreatedAt, CreatedTo: ops[3].CreatedAt}, nil},
			"all anded":        {ports.OpFilter{Kind: ports.OpCall, Target: "erp", Statuses: []ports.OpStatus{ports.OpParked, ports.OpDiscarded}, CreatedFrom: ops[1].CreatedAt.Add(time.Microsecond)}, pick(6)},
			"all anded, match": {ports.OpFilter{Kind: ports.OpWrite, Target: "erp", Statuses: []ports.OpStatus{ports.OpParked}, CreatedTo: ops[6].CreatedAt}, pick(5)},
		} {
			for _, page := range []int{1, 2, 50} {
				if got := listAll(t, s, c.f, page); !slices.Equal(got, c.want) {
					t.Fatalf("List %s, pages of %d:\n got %v\nwant %v", name, page, got, c.want)
				}
			}
		}
	})

	t.Run("FollowsChanges", func(t *testing.T) {
		s := open(t)
		a, b := NewCall(BaseTime), NewCall(BaseTime.Add(time.Second))
		insert(t, s, a, b)
		parked := ports.OpFilter{Statuses: []ports.OpStatus{ports.OpParked}}
		if got := listAll(t, s, parked, 10); len(got) != 0 {
			t.Fatalf("List Parked = %v, want nothing", got)
		}
		// a parks, and its replacement row carries a later CreatedAt: List
		// sees the new status and the new order.
		ap := a
		ap.Status, ap.CreatedAt = ports.OpParked, BaseTime.Add(time.Minute)
		put(t, s, []bool{true}, Move(ports.OpPending, ap))
		if got := listAll(t, s, parked, 10); !slices.Equal(got, []string{a.ID}) {
			t.Fatalf("List Parked = %v, want [a]", got)
		}
		if got := listAll(t, s, ports.OpFilter{}, 1); !slices.Equal(got, []string{a.ID, b.ID}) {
			t.Fatalf("List after a's CreatedAt moved = %v, want [a b]", got)
		}
		if got := listAll(t, s, ports.OpFilter{CreatedTo: BaseTime.Add(2 * time.Second)}, 10); !slices.Equal(got, []string{b.ID}) {
			t.Fatalf("List before a's new CreatedAt = %v, want [b]", got)
		}
	})

	t.Run("CursorContinuesAfterChanges", func(t *testing.T) {
		s := open(t)
		ops := []ports.Operation{NewCall(BaseTime), NewCall(BaseTime.Add(time.Second)), NewCall(BaseTime.Add(2 * time.Second))}
		insert(t, s, ops...)
		p, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{Limit: 1})
		if err != nil || len(p.Items) != 1 || p.Items[0].ID != ops[2].ID || p.Next == "" {
			t.Fatalf("first page = %v, next %q, %v", idList(p.Items), p.Next, err)
		}
		// A newer operation arrives between pages: the cursor goes on
		// from where it was, the newcomer is not on a later page.
		insert(t, s, NewCall(BaseTime.Add(time.Hour)))
		rest, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{Limit: 10, After: p.Next})
		if err != nil || !slices.Equal(idList(rest.Items), []string{ops[1].ID, ops[0].ID}) || rest.Next != "" {
			t.Fatalf("second page = %v, next %q, %v; want the two older ones", idList(rest.Items), rest.Next, err)
		}
	})

	t.Run("MalformedCursorIsInvalid", func(t *testing.T) {
		s := open(t)
		insert(t, s, NewCall(BaseTime), NewCall(BaseTime.Add(time.Second)))
		for _, c := range []string{"!!!", "not a cursor", "AAAA", base64.RawURLEncoding.EncodeToString([]byte("garbage/")),
			base64.StdEncoding.EncodeToString(make([]byte, 40)) + "=", strings.Repeat("A", 8000)} {
			if p, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{Limit: 5, After: c}); !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("List after %q = %v, %v; want an error wrapping ErrInvalid", clip(c), idList(p.Items), err)
			}
		}
	})

	t.Run("LimitBelowOneIsInvalid", func(t *testing.T) {
		s := open(t)
		if _, err := s.List(t.Context(), ports.OpFilter{}, ports.PageRequest{}); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("List with limit 0: err = %v, want one wrapping ErrInvalid", err)
		}
	})
}
