// Package adminaudittest is the contract suite of the admin audit log port:
// every adapter of [ports.AdminAudit] runs [Exercise] against its real
// backend (memory, SQLite, PostgreSQL, MS SQL) from one line of its own
// tests:
//
//	func TestAdminAuditContract(t *testing.T) {
//		adminaudittest.Exercise(t, func(t *testing.T) ports.AdminAudit {
//			return newEmptyStore(t)
//		})
//	}
//
// Every subtest asks for a fresh, empty store and uses nothing else. Times
// handed to the store carry a microsecond fraction; times read back must be
// the same instant in UTC.
package adminaudittest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// BaseTime is the fixed instant the suite builds its records around.
var BaseTime = time.Date(2025, time.June, 2, 9, 30, 0, 0, time.UTC).Add(654321 * time.Microsecond)

// NewRecord returns a valid record of a change to the entry name of kind by
// actor, i minutes after BaseTime.
func NewRecord(i int, actor string, kind ports.AdminKind, name string, action ports.AdminAction) ports.AdminRecord {
	return ports.AdminRecord{At: BaseTime.Add(time.Duration(i) * time.Minute), Actor: actor, Kind: kind, Name: name,
		Action: action, Summary: fmt.Sprintf("change %d of %s %s", i, kind, name)}
}

// Exercise runs the whole contract against the adapter. newStore is called
// once per subtest and must return an empty store.
func Exercise(t *testing.T, newStore func(t *testing.T) ports.AdminAudit) {
	t.Helper()

	t.Run("Empty", func(t *testing.T) {
		s := newStore(t)
		if got := mustRecords(t, s, ports.AdminQuery{Limit: 10}); len(got) != 0 {
			t.Errorf("AdminRecords of an empty store = %v, want none", got)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		want := []ports.AdminRecord{
			NewRecord(0, "config", ports.AdminKindList, "ops", ports.AdminCreated),
			NewRecord(1, "alice", ports.AdminKindChannel, "email", ports.AdminChanged),
			NewRecord(2, "token:ci", ports.AdminKindUser, "bob@example.com", ports.AdminPassword),
			NewRecord(3, "system", ports.AdminKindToken, "alice/cli-1a2b", ports.AdminRevoked),
		}
		// Out of time order: the order is the append order, not At's.
		want[3].At = BaseTime.Add(-time.Hour)
		var last int64
		for i := range want {
			got := mustAppend(t, s, want[i])
			if got.ID <= last {
				t.Fatalf("AppendAdmin #%d gave the ID %d after %d, want an increasing ID", i, got.ID, last)
			}
			last = got.ID
			want[i].ID = got.ID
			checkRecord(t, "AppendAdmin", want[i], got)
		}
		got := mustRecords(t, s, ports.AdminQuery{Limit: 10})
		if len(got) != len(want) {
			t.Fatalf("AdminRecords = %d records, want %d", len(got), len(want))
		}
		for i := range want {
			checkRecord(t, "AdminRecords", want[len(want)-1-i], got[i])
			if got[i].At.Location() != time.UTC {
				t.Errorf("AdminRecords[%d].At in %s, want UTC", i, got[i].At.Location())
			}
		}
	})

	t.Run("IgnoresTheGivenID", func(t *testing.T) {
		s := newStore(t)
		r := NewRecord(0, "alice", ports.AdminKindList, "ops", ports.AdminCreated)
		r.ID = 1 << 40
		got := mustAppend(t, s, r)
		if got.ID == r.ID {
			t.Errorf("AppendAdmin kept the caller's ID %d", r.ID)
		}
		next := mustAppend(t, s, NewRecord(1, "alice", ports.AdminKindList, "ops", ports.AdminDeleted))
		if next.ID <= got.ID {
			t.Errorf("IDs %d then %d, want increasing", got.ID, next.ID)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		s := newStore(t)
		var ids []int64
		for i := range 7 {
			ids = append(ids, mustAppend(t, s, NewRecord(i, "alice", ports.AdminKindList, fmt.Sprintf("l%d", i), ports.AdminCreated)).ID)
		}
		slices.Reverse(ids)
		var seen []int64
		before := int64(0)
		for page := 0; ; page++ {
			got := mustRecords(t, s, ports.AdminQuery{Limit: 3, Before: before})
			if len(got) == 0 {
				break
			}
			if len(got) > 3 {
				t.Fatalf("page %d holds %d records, want at most 3", page, len(got))
			}
			for _, r := range got {
				seen = append(seen, r.ID)
			}
			before = got[len(got)-1].ID
			if page > 7 {
				t.Fatal("the pages do not end")
			}
		}
		if !slices.Equal(seen, ids) {
			t.Errorf("paged IDs %v, want %v", seen, ids)
		}
		// Before an ID that is no record's still pages from below it.
		got := mustRecords(t, s, ports.AdminQuery{Limit: 10, Before: ids[1] + 1})
		if len(got) != 6 || got[0].ID != ids[1] {
			t.Errorf("Before %d: %d records from %v, want 6 from %d", ids[1]+1, len(got), idsOf(got), ids[1])
		}
		if got := mustRecords(t, s, ports.AdminQuery{Limit: 10, Before: ids[len(ids)-1]}); len(got) != 0 {
			t.Errorf("Before the oldest: %v, want none", idsOf(got))
		}
	})

	t.Run("Filters", func(t *testing.T) {
		s := newStore(t)
		recs := []ports.AdminRecord{
			NewRecord(0, "alice", ports.AdminKindList, "ops", ports.AdminCreated),
			NewRecord(1, "alice", ports.AdminKindChannel, "ops", ports.AdminCreated),
			NewRecord(2, "bob", ports.AdminKindList, "Ops", ports.AdminCreated),
			NewRecord(3, "bob", ports.AdminKindList, "ops", ports.AdminChanged),
			NewRecord(4, "bob", ports.AdminKindList, "ops2", ports.AdminCreated),
			NewRecord(5, "bob", ports.AdminKindUser, "ops", ports.AdminDeleted),
		}
		for i := range recs {
			recs[i] = mustAppend(t, s, recs[i])
		}
		for _, c := range []struct {
			q    ports.AdminQuery
			want []int
		}{
			{ports.AdminQuery{Kind: ports.AdminKindList}, []int{4, 3, 2, 0}},
			{ports.AdminQuery{Name: "ops"}, []int{5, 3, 1, 0}},
			{ports.AdminQuery{Kind: ports.AdminKindList, Name: "ops"}, []int{3, 0}},
			{ports.AdminQuery{Kind: ports.AdminKindList, Name: "Ops"}, []int{2}},
			{ports.AdminQuery{Kind: ports.AdminKindToken}, nil},
			{ports.AdminQuery{Name: "op"}, nil},
			{ports.AdminQuery{Kind: ports.AdminKindList, Name: "ops", Before: recs[3].ID}, []int{0}},
			{ports.AdminQuery{Kind: ports.AdminKindList, Limit: 2}, []int{4, 3}},
		} {
			if c.q.Limit == 0 {
				c.q.Limit = 10
			}
			var want []int64
			for _, i := range c.want {
				want = append(want, recs[i].ID)
			}
			if got := idsOf(mustRecords(t, s, c.q)); !slices.Equal(got, want) {
				t.Errorf("AdminRecords(%+v) = %v, want %v", c.q, got, want)
			}
		}
	})

	t.Run("Values", func(t *testing.T) {
		s := newStore(t)
		long := strings.Repeat("é", ports.MaxAdminSummary/2)
		name := strings.Repeat("ü", ports.MaxAdminName/2)
		want := []ports.AdminRecord{
			{At: BaseTime, Actor: name, Kind: ports.AdminKindChannel, Name: name, Action: ports.AdminChanged, Summary: long},
			{At: BaseTime, Actor: "o'neil", Kind: ports.AdminKindList, Name: `it's "quoted" \ 100% _`, Action: ports.AdminCreated,
				Summary: "line one\nline two\ttab; '; DROP TABLE admin_audit; --"},
			{At: BaseTime, Actor: "alice", Kind: ports.AdminKindUser, Name: "日本語 ✓", Action: ports.AdminDeleted},
		}
		for i := range want {
			want[i] = mustAppend(t, s, want[i])
		}
		got := mustRecords(t, s, ports.AdminQuery{Limit: 10})
		slices.Reverse(got)
		if len(got) != len(want) {
			t.Fatalf("AdminRecords = %d records, want %d", len(got), len(want))
		}
		for i := range want {
			checkRecord(t, "AdminRecords", want[i], got[i])
		}
		if got := mustRecords(t, s, ports.AdminQuery{Limit: 10, Name: `it's "quoted" \ 100% _`}); len(got) != 1 {
			t.Errorf("AdminRecords by a quoted name = %d records, want 1", len(got))
		}
		// A name no record can have finds nothing.
		for _, bad := range []string{"al\x00ice", "al\xffice", " alice"} {
			got, err := s.AdminRecords(t.Context(), ports.AdminQuery{Limit: 10, Name: bad})
			if err != nil && !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("AdminRecords by the name %q: %v, want none or ErrInvalid", bad, err)
			}
			if len(got) != 0 {
				t.Errorf("AdminRecords by the name %q = %d records, want none", bad, len(got))
			}
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		s := newStore(t)
		valid := mustAppend(t, s, NewRecord(0, "alice", ports.AdminKindList, "ops", ports.AdminCreated))
		bad := map[string]func(r *ports.AdminRecord){
			"zero At":              func(r *ports.AdminRecord) { r.At = time.Time{} },
			"empty Actor":          func(r *ports.AdminRecord) { r.Actor = "" },
			"Actor with a space":   func(r *ports.AdminRecord) { r.Actor = "alice " },
			"Actor with NUL":       func(r *ports.AdminRecord) { r.Actor = "al\x00ice" },
			"long Actor":           func(r *ports.AdminRecord) { r.Actor = strings.Repeat("a", ports.MaxAdminName+1) },
			"unknown Kind":         func(r *ports.AdminRecord) { r.Kind = "plugin" },
			"empty Name":           func(r *ports.AdminRecord) { r.Name = "" },
			"Name not UTF-8":       func(r *ports.AdminRecord) { r.Name = "op\xffs" },
			"long Name":            func(r *ports.AdminRecord) { r.Name = strings.Repeat("n", ports.MaxAdminName+1) },
			"unknown Action":       func(r *ports.AdminRecord) { r.Action = "renamed" },
			"Summary with NUL":     func(r *ports.AdminRecord) { r.Summary = "a\x00b" },
			"Summary not UTF-8":    func(r *ports.AdminRecord) { r.Summary = "a\xffb" },
			"Summary over a bound": func(r *ports.AdminRecord) { r.Summary = strings.Repeat("s", ports.MaxAdminSummary+1) },
		}
		for why, breakIt := range bad {
			r := NewRecord(1, "bob", ports.AdminKindUser, "carol", ports.AdminCreated)
			breakIt(&r)
			_, err := s.AppendAdmin(t.Context(), r)
			if !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("AppendAdmin with %s = %v, want ErrInvalid", why, err)
			}
		}
		got := mustRecords(t, s, ports.AdminQuery{Limit: 10})
		if len(got) != 1 {
			t.Fatalf("AdminRecords after refused appends = %d records, want 1", len(got))
		}
		checkRecord(t, "AdminRecords after refused appends", valid, got[0])
		for why, q := range map[string]ports.AdminQuery{
			"limit 0":          {},
			"limit over":       {Limit: ports.MaxAdminPage + 1},
			"negative limit":   {Limit: -1},
			"negative before":  {Limit: 1, Before: -1},
			"unknown kind":     {Limit: 1, Kind: "plugin"},
			"name over abound": {Limit: 1, Name: strings.Repeat("n", ports.MaxAdminName+1)},
		} {
			if _, err := s.AdminRecords(t.Context(), q); !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("AdminRecords with %s = %v, want ErrInvalid", why, err)
			}
		}
		if got := mustRecords(t, s, ports.AdminQuery{Limit: ports.MaxAdminPage}); len(got) != 1 {
			t.Errorf("AdminRecords with the largest limit = %d records, want 1", len(got))
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := newStore(t)
		const writers, each = 6, 10
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			ids  = map[int64]bool{}
			errs []error
		)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					r, err := s.AppendAdmin(t.Context(), NewRecord(i, fmt.Sprintf("w%d", w), ports.AdminKindList, "ops", ports.AdminChanged))
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else if ids[r.ID] {
						errs = append(errs, fmt.Errorf("ID %d given twice", r.ID))
					} else {
						ids[r.ID] = true
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		got := mustRecords(t, s, ports.AdminQuery{Limit: ports.MaxAdminPage})
		if len(got) != writers*each {
			t.Fatalf("AdminRecords = %d records, want %d", len(got), writers*each)
		}
		for i, r := range got {
			if !ids[r.ID] {
				t.Errorf("AdminRecords[%d] has the ID %d no append returned", i, r.ID)
			}
			if i > 0 && r.ID >= got[i-1].ID {
				t.Errorf("AdminRecords not newest first: %d after %d", r.ID, got[i-1].ID)
			}
		}
	})
}

// DiffRecord lists the fields in which got differs from want, one line per
// field, or nothing when they are equal. Times are compared with
// [time.Time.Equal].
func DiffRecord(want, got ports.AdminRecord) []string {
	var d []string
	add := func(name string, w, g any) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, fmt.Sprint(w), fmt.Sprint(g)))
		}
	}
	add("ID", want.ID, got.ID)
	if !want.At.Equal(got.At) {
		d = append(d, fmt.Sprintf("At: want %s, got %s", want.At.Format(time.RFC3339Nano), got.At.Format(time.RFC3339Nano)))
	}
	add("Actor", want.Actor, got.Actor)
	add("Kind", want.Kind, got.Kind)
	add("Name", want.Name, got.Name)
	add("Action", want.Action, got.Action)
	add("Summary", want.Summary, got.Summary)
	return d
}

func checkRecord(t *testing.T, what string, want, got ports.AdminRecord) {
	t.Helper()
	if d := DiffRecord(want, got); len(d) > 0 {
		t.Errorf("%s: record %d differs:\n  %s", what, want.ID, strings.Join(d, "\n  "))
	}
}

func mustAppend(t *testing.T, s ports.AdminAudit, r ports.AdminRecord) ports.AdminRecord {
	t.Helper()
	got, err := s.AppendAdmin(t.Context(), r)
	if err != nil {
		t.Fatalf("AppendAdmin(%s %s): %v", r.Kind, r.Name, err)
	}
	return got
}

func mustRecords(t *testing.T, s ports.AdminAudit, q ports.AdminQuery) []ports.AdminRecord {
	t.Helper()
	rs, err := s.AdminRecords(t.Context(), q)
	if err != nil {
		t.Fatalf("AdminRecords(%+v): %v", q, err)
	}
	return rs
}

func idsOf(rs []ports.AdminRecord) []int64 {
	var out []int64
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
