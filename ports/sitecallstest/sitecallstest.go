// Package sitecallstest is the contract suite of [ports.SiteCallStore],
// central's mirror of the sites' cached operations: every adapter runs
// [Exercise] against its real backend from one line of its own tests:
//
//	func TestSiteCallContract(t *testing.T) {
//		sitecallstest.Exercise(t, func(t *testing.T) ports.SiteCallStore { return newStore(t) })
//	}
//
// The suite is organised by area of the port (reports, queries, KPIs,
// purge, cursors, health, commands), as ports/storetest is. Every subtest
// asks for a fresh, empty store and uses nothing else. Times handed to the
// store are truncated to the microsecond and compared with
// [time.Time.Equal], so a store need keep no more than microsecond
// precision and no time zone.
package sitecallstest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// Exercise runs the whole contract against the adapter. newStore is called
// once per subtest and must return an empty store.
func Exercise(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	t.Helper()
	t.Run("Report", func(t *testing.T) { exerciseReport(t, newStore) })
	t.Run("Query", func(t *testing.T) { exerciseQuery(t, newStore) })
	t.Run("KPIs", func(t *testing.T) { exerciseKPIs(t, newStore) })
	t.Run("Purge", func(t *testing.T) { exercisePurge(t, newStore) })
	t.Run("Cursor", func(t *testing.T) { exerciseCursor(t, newStore) })
	t.Run("Health", func(t *testing.T) { exerciseHealth(t, newStore) })
	t.Run("Commands", func(t *testing.T) { exerciseCommands(t, newStore) })
}

// BaseTime is the instant the suite builds its data around (with a
// microsecond fraction).
var BaseTime = storetest.BaseTime

// NewOperation returns a valid Parked cached call created at createdAt and
// last changed a minute later, at version 3, with a random UUID, a target,
// a method, an error and provenance. Callers adjust the fields a test is
// about.
func NewOperation(createdAt time.Time) ports.Operation {
	id := storetest.NewID()
	return ports.Operation{
		ID: id, Kind: ports.OpCall, Target: "erp", Method: "postOrder",
		Status: ports.OpParked, RetryCount: 5, LastError: "http: 503 \"busy\" — réessayez",
		SourceInstance: "line-4", SourceScript: "orders/post.script",
		ExecutionID: "exec-" + id[:8], ParentExecutionID: "parent-" + id[:8],
		CreatedAt: createdAt, UpdatedAt: createdAt.Add(time.Minute + 7*time.Microsecond), Version: 3,
	}
}

// withStatus returns op moved to status at version v, changed at at:
// terminal statuses get TerminalAt, buffered ones lose it.
func withStatus(op ports.Operation, status ports.OpStatus, v uint64, at time.Time) ports.Operation {
	op.Status, op.Version, op.UpdatedAt = status, v, at
	op.TerminalAt = time.Time{}
	if status.Terminal() {
		op.TerminalAt = at
	}
	return op
}

// DiffSiteCall lists the fields in which got differs from want, one line
// per field, or nothing when they are equal. Times are compared with
// [time.Time.Equal]; Payload is not compared (the mirror keeps none).
func DiffSiteCall(want, got ports.SiteCall) []string {
	var d []string
	str := func(name, w, g string) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, w, g))
		}
	}
	tm := func(name string, w, g time.Time) {
		if !w.Equal(g) {
			d = append(d, fmt.Sprintf("%s: want %s, got %s", name, w, g))
		}
	}
	w, g := want.Operation, got.Operation
	str("Site", want.Site, got.Site)
	str("ID", w.ID, g.ID)
	str("Kind", string(w.Kind), string(g.Kind))
	str("Target", w.Target, g.Target)
	str("Method", w.Method, g.Method)
	str("Status", string(w.Status), string(g.Status))
	if w.RetryCount != g.RetryCount {
		d = append(d, fmt.Sprintf("RetryCount: want %d, got %d", w.RetryCount, g.RetryCount))
	}
	str("LastError", w.LastError, g.LastError)
	tm("NextAttemptAt", w.NextAttemptAt, g.NextAttemptAt)
	str("SourceInstance", w.SourceInstance, g.SourceInstance)
	str("SourceScript", w.SourceScript, g.SourceScript)
	str("ExecutionID", w.ExecutionID, g.ExecutionID)
	str("ParentExecutionID", w.ParentExecutionID, g.ParentExecutionID)
	tm("CreatedAt", w.CreatedAt, g.CreatedAt)
	tm("UpdatedAt", w.UpdatedAt, g.UpdatedAt)
	tm("TerminalAt", w.TerminalAt, g.TerminalAt)
	if w.Version != g.Version {
		d = append(d, fmt.Sprintf("Version: want %d, got %d", w.Version, g.Version))
	}
	tm("ReportedAt", want.ReportedAt, got.ReportedAt)
	str("Requested", string(want.Requested), string(got.Requested))
	str("RequestedBy", want.RequestedBy, got.RequestedBy)
	tm("RequestedAt", want.RequestedAt, got.RequestedAt)
	if len(g.Payload.Params) > 0 || g.Payload.SQL != "" || len(g.Payload.Args) > 0 {
		d = append(d, "Payload: want none, got one")
	}
	return d
}

// mirrored is the row central keeps of op reported by site at now.
func mirrored(site string, op ports.Operation, now time.Time) ports.SiteCall {
	op.Payload = ports.OpPayload{}
	return ports.SiteCall{Site: site, Operation: op, ReportedAt: now}
}

// report stores ops of site at now and fails t on an error.
func report(t *testing.T, s ports.SiteCallStore, site string, now time.Time, ops ...ports.Operation) int {
	t.Helper()
	n, err := s.ReportSiteCalls(t.Context(), site, ops, now)
	if err != nil {
		t.Fatalf("ReportSiteCalls(%s, %d rows): %v", site, len(ops), err)
	}
	return n
}

// wantRow fails t unless the stored row (site, want.ID) is want.
func wantRow(t *testing.T, s ports.SiteCallStore, want ports.SiteCall) {
	t.Helper()
	got, err := s.GetSiteCall(t.Context(), want.Site, want.ID)
	if err != nil {
		t.Fatalf("GetSiteCall(%s, %s): %v", want.Site, want.ID, err)
	}
	if d := DiffSiteCall(want, got); len(d) > 0 {
		t.Errorf("row %s/%s differs:\n  %s", want.Site, want.ID, strings.Join(d, "\n  "))
	}
}

// wantErr fails t unless err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s = %v, want an error wrapping %v", what, err, target)
	}
}

func exerciseReport(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	ctx := newStore
	now := BaseTime.Add(time.Hour)

	t.Run("InsertThenOnlyNewerReplaces", func(t *testing.T) {
		s := ctx(t)
		op := NewOperation(BaseTime)
		op.NextAttemptAt = BaseTime.Add(2*time.Minute + 3*time.Microsecond)
		op.Payload = ports.OpPayload{Params: []byte(`{"order":7}`)}
		if n := report(t, s, "site-1", now, op); n != 1 {
			t.Errorf("first report changed %d rows, want 1", n)
		}
		wantRow(t, s, mirrored("site-1", op, now))

		older := withStatus(op, ports.OpRetrying, 2, op.UpdatedAt.Add(-time.Second))
		same := withStatus(op, ports.OpDelivered, 3, op.UpdatedAt)
		if n := report(t, s, "site-1", now.Add(time.Second), older, same); n != 0 {
			t.Errorf("a late and a repeated report changed %d rows, want 0", n)
		}
		wantRow(t, s, mirrored("site-1", op, now))

		newer := withStatus(op, ports.OpDelivered, 4, op.UpdatedAt.Add(time.Second))
		newer.LastError, newer.NextAttemptAt = "", time.Time{}
		if n := report(t, s, "site-1", now.Add(2*time.Second), newer); n != 1 {
			t.Errorf("a newer report changed %d rows, want 1", n)
		}
		wantRow(t, s, mirrored("site-1", newer, now.Add(2*time.Second)))
	})

	t.Run("SitesAreApart", func(t *testing.T) {
		s := ctx(t)
		op := NewOperation(BaseTime)
		other := withStatus(op, ports.OpDelivered, 9, op.UpdatedAt)
		report(t, s, "site-1", now, op)
		if n := report(t, s, "site-2", now, other); n != 1 {
			t.Errorf("the same id at another site changed %d rows, want 1 (a row of its own)", n)
		}
		wantRow(t, s, mirrored("site-1", op, now))
		wantRow(t, s, mirrored("site-2", other, now))
		_, err := s.GetSiteCall(t.Context(), "site-3", op.ID)
		wantErr(t, "GetSiteCall of another site", err, ports.ErrNotFound)
		_, err = s.GetSiteCall(t.Context(), "site-1", storetest.NewID())
		wantErr(t, "GetSiteCall of an unknown id", err, ports.ErrNotFound)
	})

	t.Run("HighestVersionInOneReport", func(t *testing.T) {
		s := ctx(t)
		op := NewOperation(BaseTime)
		v5 := withStatus(op, ports.OpRetrying, 5, op.UpdatedAt.Add(time.Second))
		v4 := withStatus(op, ports.OpPending, 4, op.UpdatedAt)
		report(t, s, "site-1", now, v5, v4)
		wantRow(t, s, mirrored("site-1", v5, now))
	})

	t.Run("InvalidStoresNothing", func(t *testing.T) {
		s := ctx(t)
		good := NewOperation(BaseTime)
		bad := NewOperation(BaseTime)
		bad.Version = 0
		_, err := s.ReportSiteCalls(t.Context(), "site-1", []ports.Operation{good, bad}, now)
		wantErr(t, "ReportSiteCalls with a row at version 0", err, ports.ErrInvalid)
		_, err = s.GetSiteCall(t.Context(), "site-1", good.ID)
		wantErr(t, "GetSiteCall of the valid row of a refused report", err, ports.ErrNotFound)

		for name, mutate := range map[string]func(*ports.Operation){
			"empty id":        func(o *ports.Operation) { o.ID = "" },
			"long id":         func(o *ports.Operation) { o.ID = strings.Repeat("a", ports.MaxSiteCallIDBytes+1) },
			"unknown kind":    func(o *ports.Operation) { o.Kind = "Fax" },
			"unknown status":  func(o *ports.Operation) { o.Status = "Lost" },
			"long error":      func(o *ports.Operation) { o.LastError = strings.Repeat("e", ports.MaxSiteCallErrorBytes+1) },
			"bad UTF-8":       func(o *ports.Operation) { o.SourceScript = "\xff" },
			"terminal no end": func(o *ports.Operation) { o.Status = ports.OpDelivered },
		} {
			op := NewOperation(BaseTime)
			mutate(&op)
			_, err := s.ReportSiteCalls(t.Context(), "site-1", []ports.Operation{op}, now)
			wantErr(t, "ReportSiteCalls with "+name, err, ports.ErrInvalid)
		}
		_, err = s.ReportSiteCalls(t.Context(), "", []ports.Operation{good}, now)
		wantErr(t, "ReportSiteCalls of an empty site", err, ports.ErrInvalid)
		many := make([]ports.Operation, ports.MaxSiteCallReport+1)
		for i := range many {
			many[i] = NewOperation(BaseTime)
		}
		_, err = s.ReportSiteCalls(t.Context(), "site-1", many, now)
		wantErr(t, "ReportSiteCalls over MaxSiteCallReport", err, ports.ErrInvalid)
		if n, err := s.CountSiteCalls(t.Context(), ports.SiteCallFilter{}); err != nil || n != 0 {
			t.Errorf("CountSiteCalls after refused reports = %d, %v; want 0", n, err)
		}
	})

	t.Run("ConcurrentReportsKeepTheNewest", func(t *testing.T) {
		// As from several central nodes at once: telemetry and
		// reconciliation pages carrying versions 1 to 12 of three rows, in
		// every order.
		s := ctx(t)
		ops := []ports.Operation{NewOperation(BaseTime), NewOperation(BaseTime), NewOperation(BaseTime)}
		const versions = 12
		var wg sync.WaitGroup
		errs := make(chan error, versions)
		for v := range uint64(versions) {
			wg.Go(func() {
				batch := make([]ports.Operation, len(ops))
				for i, op := range ops {
					op.Version, op.RetryCount = versions-v, int(versions-v)
					batch[(i+int(v))%len(ops)] = op
				}
				if _, err := s.ReportSiteCalls(t.Context(), "site-1", batch, now); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("ReportSiteCalls: %v", err)
		}
		for _, op := range ops {
			op.Version, op.RetryCount = versions, versions
			wantRow(t, s, mirrored("site-1", op, now))
		}
	})

	t.Run("FullReport", func(t *testing.T) {
		s := ctx(t)
		ops := make([]ports.Operation, ports.MaxSiteCallReport)
		for i := range ops {
			ops[i] = NewOperation(BaseTime.Add(time.Duration(i) * time.Millisecond))
		}
		if n := report(t, s, "site-1", now, ops...); n != len(ops) {
			t.Errorf("a report of %d rows changed %d", len(ops), n)
		}
		if n := report(t, s, "site-1", now, ops...); n != 0 {
			t.Errorf("the same report again changed %d rows, want 0", n)
		}
	})
}

func exerciseQuery(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	now := BaseTime.Add(time.Hour)
	var all []ports.SiteCall
	add := func(site string, op ports.Operation) {
		report(t, s, site, now, op)
		all = append(all, mirrored(site, op, now))
	}
	// Rows that tie on CreatedAt (across sites and within one), of both
	// kinds and every status.
	for i := range 30 {
		op := NewOperation(BaseTime.Add(time.Duration(i/3) * time.Second))
		switch i % 6 {
		case 1:
			op = withStatus(op, ports.OpRetrying, 2, op.UpdatedAt)
		case 2:
			op = withStatus(op, ports.OpDelivered, 4, op.UpdatedAt)
			op.LastError = ""
		case 3:
			op.Kind, op.Target, op.Method = ports.OpWrite, "historian", ""
			op.LastError = "deadlock 100%_done"
		case 4:
			op = withStatus(op, ports.OpFailed, 2, op.UpdatedAt)
			op.Target = "mes"
		}
		add([]string{"site-a", "site-b", "site-c"}[i%3], op)
	}
	slices.SortFunc(all, newestFirst)

	check := func(name string, f ports.SiteCallFilter, keep func(ports.SiteCall) bool) {
		t.Run(name, func(t *testing.T) {
			var want []ports.SiteCall
			for _, c := range all {
				if keep(c) {
					want = append(want, c)
				}
			}
			if len(want) == 0 || len(want) == len(all) && name != "All" {
				t.Fatalf("filter %s keeps %d of %d rows: not a test", name, len(want), len(all))
			}
			var got []ports.SiteCall
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(all) {
					t.Fatalf("paging does not end")
				}
				p, err := s.QuerySiteCalls(t.Context(), f, ports.PageRequest{Limit: 4, After: after})
				if err != nil {
					t.Fatalf("QuerySiteCalls: %v", err)
				}
				got = append(got, p.Items...)
				if p.Next == "" {
					break
				}
				after = p.Next
			}
			if len(got) != len(want) {
				t.Fatalf("QuerySiteCalls returned %d rows over its pages, want %d", len(got), len(want))
			}
			for i := range want {
				if d := DiffSiteCall(want[i], got[i]); len(d) > 0 {
					t.Fatalf("row %d (%s/%s) differs:\n  %s", i, want[i].Site, want[i].ID, strings.Join(d, "\n  "))
				}
			}
			if n, err := s.CountSiteCalls(t.Context(), f); err != nil || n != int64(len(want)) {
				t.Errorf("CountSiteCalls = %d, %v; want %d", n, err, len(want))
			}
		})
	}
	check("All", ports.SiteCallFilter{}, func(ports.SiteCall) bool { return true })
	check("Site", ports.SiteCallFilter{Site: "site-b"}, func(c ports.SiteCall) bool { return c.Site == "site-b" })
	check("Kind", ports.SiteCallFilter{Kind: ports.OpWrite}, func(c ports.SiteCall) bool { return c.Kind == ports.OpWrite })
	check("Target", ports.SiteCallFilter{Target: "mes"}, func(c ports.SiteCall) bool { return c.Target == "mes" })
	check("Statuses", ports.SiteCallFilter{Statuses: []ports.OpStatus{ports.OpParked, ports.OpFailed}},
		func(c ports.SiteCall) bool { return c.Status == ports.OpParked || c.Status == ports.OpFailed })
	from, to := BaseTime.Add(2*time.Second), BaseTime.Add(5*time.Second)
	check("Created", ports.SiteCallFilter{CreatedFrom: from, CreatedTo: to},
		func(c ports.SiteCall) bool { return !c.CreatedAt.Before(from) && c.CreatedAt.Before(to) })
	uFrom, uTo := from.Add(time.Minute), to.Add(time.Minute)
	check("Updated", ports.SiteCallFilter{UpdatedFrom: uFrom, UpdatedTo: uTo},
		func(c ports.SiteCall) bool { return !c.UpdatedAt.Before(uFrom) && c.UpdatedAt.Before(uTo) })
	check("KeywordFoldsASCII", ports.SiteCallFilter{Keyword: "HISTORIAN"},
		func(c ports.SiteCall) bool { return c.Target == "historian" })
	check("KeywordInError", ports.SiteCallFilter{Keyword: "RéESSAYEZ"},
		func(c ports.SiteCall) bool { return strings.Contains(c.LastError, "réessayez") })
	check("KeywordWildcardsLiteral", ports.SiteCallFilter{Keyword: "100%_d"},
		func(c ports.SiteCall) bool { return strings.Contains(c.LastError, "100%_d") })
	check("KeywordInID", ports.SiteCallFilter{Keyword: strings.ToUpper(all[7].ID[:13])},
		func(c ports.SiteCall) bool { return strings.HasPrefix(c.ID, all[7].ID[:13]) })
	check("KeywordInProvenance", ports.SiteCallFilter{Keyword: "ORDERS/POST", Site: "site-c"},
		func(c ports.SiteCall) bool { return c.Site == "site-c" })
	t.Run("ReportedTo", func(t *testing.T) {
		// Central's time of the report bounds, not the site's time of
		// the change: a row changed at the site long before the pin but
		// reported after it is left out.
		s := newStore(t)
		early, late := NewOperation(BaseTime), NewOperation(BaseTime.Add(-time.Hour))
		report(t, s, "site-a", now, early)
		report(t, s, "site-a", now.Add(time.Minute), late)
		f := ports.SiteCallFilter{ReportedTo: now.Add(time.Second)}
		p, err := s.QuerySiteCalls(t.Context(), f, ports.PageRequest{Limit: 10})
		if err != nil || len(p.Items) != 1 || p.Items[0].ID != early.ID {
			t.Fatalf("QuerySiteCalls reported before the pin: %v, %v", p.Items, err)
		}
		if n, err := s.CountSiteCalls(t.Context(), f); err != nil || n != 1 {
			t.Errorf("CountSiteCalls reported before the pin = %d, %v; want 1", n, err)
		}
	})
	t.Run("KeywordFollowsAChangedError", func(t *testing.T) {
		// A newer report changes the row's last error: a keyword finds the
		// row by its new error, no more by its old one.
		s := newStore(t)
		op := NewOperation(BaseTime)
		op.LastError = "alpha-timeout at the gateway"
		report(t, s, "site-a", now, op)
		op = withStatus(op, ports.OpParked, op.Version+1, op.UpdatedAt.Add(time.Second))
		op.LastError = "bravo-refused by the historian"
		report(t, s, "site-a", now, op)
		for kw, want := range map[string]int64{"BRAVO-REFUSED": 1, "alpha-timeout": 0} {
			if n, err := s.CountSiteCalls(t.Context(), ports.SiteCallFilter{Keyword: kw}); err != nil || n != want {
				t.Errorf("CountSiteCalls(keyword %q) = %d, %v; want %d", kw, n, err, want)
			}
		}
	})
	t.Run("NoMatch", func(t *testing.T) {
		p, err := s.QuerySiteCalls(t.Context(), ports.SiteCallFilter{Keyword: "100%%"}, ports.PageRequest{Limit: 10})
		if err != nil || len(p.Items) != 0 || p.Next != "" {
			t.Errorf("QuerySiteCalls of a keyword no row holds = %d rows, next %q, %v", len(p.Items), p.Next, err)
		}
	})
	t.Run("BadPage", func(t *testing.T) {
		_, err := s.QuerySiteCalls(t.Context(), ports.SiteCallFilter{}, ports.PageRequest{Limit: 0})
		wantErr(t, "QuerySiteCalls with limit 0", err, ports.ErrInvalid)
		for _, c := range []string{"!!", "bm90IGEgY3Vyc29y", "%%%"} {
			_, err := s.QuerySiteCalls(t.Context(), ports.SiteCallFilter{}, ports.PageRequest{Limit: 3, After: c})
			wantErr(t, fmt.Sprintf("QuerySiteCalls after %q", c), err, ports.ErrInvalid)
		}
	})
}

// newestFirst orders mirror rows as QuerySiteCalls does.
func newestFirst(a, b ports.SiteCall) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	if c := strings.Compare(b.Site, a.Site); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

func exerciseKPIs(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	now := BaseTime.Add(time.Hour)
	at := func(m int) time.Time { return BaseTime.Add(time.Duration(m) * time.Minute) }
	op := func(created int, status ports.OpStatus, changed int) ports.Operation {
		return withStatus(NewOperation(at(created)), status, 5, at(changed))
	}
	report(t, s, "site-b", now,
		op(3, ports.OpPending, 4), op(1, ports.OpRetrying, 9), op(2, ports.OpRetrying, 9), op(5, ports.OpParked, 9),
		op(0, ports.OpFailed, 10), op(0, ports.OpFailed, 20), op(0, ports.OpDelivered, 30), op(0, ports.OpDiscarded, 30))
	report(t, s, "site-a", now, op(7, ports.OpDelivered, 8), op(8, ports.OpFailed, 40))
	got, err := s.SiteCallKPIs(t.Context(), ports.SiteCallKPIRequest{FailedSince: at(20)})
	if err != nil {
		t.Fatalf("SiteCallKPIs: %v", err)
	}
	want := []ports.SiteCallKPI{
		{Site: "site-a", Failed: 1},
		{Site: "site-b", Pending: 1, Retrying: 2, Parked: 1, Failed: 1, OldestBufferedAt: at(1)},
	}
	if len(got) != len(want) {
		t.Fatalf("SiteCallKPIs = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Site != w.Site || g.Pending != w.Pending || g.Retrying != w.Retrying || g.Parked != w.Parked ||
			g.Failed != w.Failed || !g.OldestBufferedAt.Equal(w.OldestBufferedAt) {
			t.Errorf("SiteCallKPIs[%d] = %+v, want %+v", i, g, w)
		}
	}
	empty, err := newStore(t).SiteCallKPIs(t.Context(), ports.SiteCallKPIRequest{})
	if err != nil || len(empty) != 0 {
		t.Errorf("SiteCallKPIs of an empty store = %+v, %v; want none", empty, err)
	}
}

func exercisePurge(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	now := BaseTime.Add(time.Hour)
	at := func(m int) time.Time { return BaseTime.Add(time.Duration(m) * time.Minute) }
	term := func(status ports.OpStatus, m int) ports.Operation {
		return withStatus(NewOperation(BaseTime), status, 5, at(m))
	}
	old1, old2, old3 := term(ports.OpDelivered, 1), term(ports.OpFailed, 2), term(ports.OpDiscarded, 3)
	recent := term(ports.OpDelivered, 20)
	parked := withStatus(NewOperation(BaseTime), ports.OpParked, 5, at(1))
	report(t, s, "site-1", now, old3, old1, recent, parked)
	report(t, s, "site-2", now, old2)

	finished := ports.SiteCommand{ID: storetest.NewID(), Site: "site-1", OperationID: old1.ID,
		Action: ports.SiteRetry, Actor: "alice", RequestedAt: at(0)}
	open := ports.SiteCommand{ID: storetest.NewID(), Site: "site-1", OperationID: parked.ID,
		Action: ports.SiteDiscard, Actor: "alice", RequestedAt: at(0)}
	if err := s.RequestSiteCommands(t.Context(), []ports.SiteCommand{finished, open}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishSiteCommand(t.Context(), "site-1", finished.ID, ports.CommandApplied, "", at(1)); err != nil {
		t.Fatal(err)
	}

	_, err := s.PurgeSiteCalls(t.Context(), at(10), 0)
	wantErr(t, "PurgeSiteCalls with limit 0", err, ports.ErrInvalid)
	n, err := s.PurgeSiteCalls(t.Context(), at(10), 2)
	if err != nil || n != 2 {
		t.Fatalf("PurgeSiteCalls(limit 2) = %d, %v; want 2", n, err)
	}
	gone := func(site, id string) bool {
		_, err := s.GetSiteCall(t.Context(), site, id)
		return errors.Is(err, ports.ErrNotFound)
	}
	if !gone("site-1", old1.ID) || !gone("site-2", old2.ID) || gone("site-1", old3.ID) {
		t.Errorf("PurgeSiteCalls(limit 2) did not remove the two oldest terminal rows alone")
	}
	n, err = s.PurgeSiteCalls(t.Context(), at(10), 10)
	if err != nil || n != 1 || !gone("site-1", old3.ID) {
		t.Errorf("second PurgeSiteCalls = %d, %v; want the third old row", n, err)
	}
	if gone("site-1", recent.ID) || gone("site-1", parked.ID) {
		t.Errorf("PurgeSiteCalls removed a recent terminal row or a buffered one")
	}
	if h, err := s.SiteCommands(t.Context(), "site-1", old1.ID); err != nil || len(h) != 0 {
		t.Errorf("SiteCommands of a command finished before the cutoff = %+v, %v; want it purged", h, err)
	}
	if h, err := s.SiteCommands(t.Context(), "site-1", parked.ID); err != nil || len(h) != 1 {
		t.Errorf("SiteCommands of a command still requested = %+v, %v; want it kept", h, err)
	}
}

func exerciseCursor(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	c, err := s.SiteCursor(t.Context(), "site-1")
	if err != nil || c != (ports.SiteCursor{}) {
		t.Fatalf("SiteCursor of a site never read = %+v, %v; want the zero cursor", c, err)
	}
	want := ports.SiteCursor{Epoch: "epoch-1", After: "AAAB|x"}
	for _, w := range []ports.SiteCursor{{Epoch: "epoch-0", After: "p"}, want} {
		if err := s.SetSiteCursor(t.Context(), "site-1", w); err != nil {
			t.Fatalf("SetSiteCursor: %v", err)
		}
	}
	if err := s.SetSiteCursor(t.Context(), "site-2", ports.SiteCursor{Epoch: "other"}); err != nil {
		t.Fatalf("SetSiteCursor: %v", err)
	}
	if c, err := s.SiteCursor(t.Context(), "site-1"); err != nil || c != want {
		t.Errorf("SiteCursor = %+v, %v; want %+v", c, err, want)
	}
	wantErr(t, "SetSiteCursor of an empty site", s.SetSiteCursor(t.Context(), "", want), ports.ErrInvalid)
	long := ports.SiteCursor{Epoch: "e", After: strings.Repeat("p", ports.MaxSiteCursorBytes+1)}
	wantErr(t, "SetSiteCursor over MaxSiteCursorBytes", s.SetSiteCursor(t.Context(), "site-1", long), ports.ErrInvalid)
}

func exerciseHealth(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	now := BaseTime.Add(time.Hour)
	h := func(site, node string, backlog int64, at time.Time) ports.SiteNodeHealth {
		return ports.SiteNodeHealth{ReportedAt: at, SiteHealth: ports.SiteHealth{
			Site: site, Node: node, Backlog: backlog, OldestEnqueuedAt: BaseTime.Add(3 * time.Microsecond),
			Replica:            ports.ReplicaState{Node: node, Role: ports.RoleLeader, Term: 7, Leader: node},
			LastCentralContact: at.Add(-time.Second), LastCentralError: "dial: refused",
			Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 2, Parked: 1, OldestBufferedAt: BaseTime, Terminal: 4}},
		}}
	}
	if got, err := s.SiteHealth(t.Context()); err != nil || len(got) != 0 {
		t.Fatalf("SiteHealth of an empty store = %+v, %v", got, err)
	}
	want := []ports.SiteNodeHealth{h("site-a", "n1", 3, now.Add(time.Minute)), h("site-a", "n2", 0, now), h("site-b", "n1", 9, now)}
	for _, x := range []ports.SiteNodeHealth{want[2], h("site-a", "n1", 1, now), want[1], want[0]} {
		if err := s.RecordSiteHealth(t.Context(), x); err != nil {
			t.Fatalf("RecordSiteHealth: %v", err)
		}
	}
	got, err := s.SiteHealth(t.Context())
	if err != nil || len(got) != len(want) {
		t.Fatalf("SiteHealth = %+v, %v; want %d nodes", got, err, len(want))
	}
	for i := range want {
		if d := diffHealth(want[i], got[i]); d != "" {
			t.Errorf("SiteHealth[%d]: %s", i, d)
		}
	}
	bad := h("", "n1", 0, now)
	wantErr(t, "RecordSiteHealth of an empty site", s.RecordSiteHealth(t.Context(), bad), ports.ErrInvalid)
	bad = h("site-a", "n1", 0, now)
	bad.LastCentralError = strings.Repeat("x", ports.MaxSiteCallErrorBytes+1)
	wantErr(t, "RecordSiteHealth of a long error", s.RecordSiteHealth(t.Context(), bad), ports.ErrInvalid)
}

// diffHealth says how got differs from want, or "".
func diffHealth(want, got ports.SiteNodeHealth) string {
	w, g := want, got
	switch {
	case w.Site != g.Site || w.Node != g.Node || w.Backlog != g.Backlog || w.Replica != g.Replica ||
		w.LastCentralError != g.LastCentralError:
		return fmt.Sprintf("got %+v, want %+v", g, w)
	case !w.ReportedAt.Equal(g.ReportedAt) || !w.OldestEnqueuedAt.Equal(g.OldestEnqueuedAt) ||
		!w.LastCentralContact.Equal(g.LastCentralContact):
		return fmt.Sprintf("times: got %+v, want %+v", g, w)
	case len(w.Operations) != len(g.Operations):
		return fmt.Sprintf("operations: got %+v, want %+v", g.Operations, w.Operations)
	}
	for i := range w.Operations {
		a, b := w.Operations[i], g.Operations[i]
		if a.Kind != b.Kind || a.Backlog != b.Backlog || a.Parked != b.Parked || a.Terminal != b.Terminal ||
			!a.OldestBufferedAt.Equal(b.OldestBufferedAt) {
			return fmt.Sprintf("operations: got %+v, want %+v", g.Operations, w.Operations)
		}
	}
	return ""
}

func exerciseCommands(t *testing.T, newStore func(t *testing.T) ports.SiteCallStore) {
	s := newStore(t)
	ctx := t.Context()
	now := BaseTime.Add(time.Hour)
	p1, p2 := NewOperation(BaseTime), NewOperation(BaseTime.Add(time.Second))
	report(t, s, "site-1", now, p1, p2)
	cmd := func(op string, action ports.SiteCommandAction, at time.Time) ports.SiteCommand {
		return ports.SiteCommand{ID: storetest.NewID(), Site: "site-1", OperationID: op, Action: action,
			Actor: "alice@example.com", RequestedAt: at}
	}
	retry := cmd(p1.ID, ports.SiteRetry, now.Add(time.Second))
	discard := cmd(p2.ID, ports.SiteDiscard, now.Add(2*time.Second))
	ghost := cmd(storetest.NewID(), ports.SiteRetry, now.Add(3*time.Second))
	if err := s.RequestSiteCommands(ctx, []ports.SiteCommand{discard, retry, ghost}); err != nil {
		t.Fatalf("RequestSiteCommands: %v", err)
	}
	marked := func(op ports.Operation, c ports.SiteCommand) ports.SiteCall {
		m := mirrored("site-1", op, now)
		m.Requested, m.RequestedBy, m.RequestedAt = c.Action, c.Actor, c.RequestedAt
		return m
	}
	wantRow(t, s, marked(p1, retry))
	wantRow(t, s, marked(p2, discard))

	t.Run("Conflict", func(t *testing.T) {
		fresh := cmd(p1.ID, ports.SiteDiscard, now.Add(4*time.Second))
		err := s.RequestSiteCommands(ctx, []ports.SiteCommand{fresh, retry})
		wantErr(t, "RequestSiteCommands with an id already stored", err, ports.ErrConflict)
		err = s.RequestSiteCommands(ctx, []ports.SiteCommand{fresh, fresh})
		wantErr(t, "RequestSiteCommands with one id twice", err, ports.ErrConflict)
		if h, _ := s.SiteCommands(ctx, "site-1", p1.ID); len(h) != 1 {
			t.Errorf("a refused RequestSiteCommands stored something: history %+v", h)
		}
		wantRow(t, s, marked(p1, retry))
		bad := cmd(p1.ID, "Reboot", now)
		wantErr(t, "RequestSiteCommands of an unknown action", s.RequestSiteCommands(ctx, []ports.SiteCommand{bad}), ports.ErrInvalid)
	})

	t.Run("Pending", func(t *testing.T) {
		got, err := s.PendingSiteCommands(ctx, "site-1", 2)
		if err != nil || len(got) != 2 || got[0].ID != retry.ID || got[1].ID != discard.ID {
			t.Fatalf("PendingSiteCommands(limit 2) = %+v, %v; want the retry, then the discard", got, err)
		}
		g := got[0]
		if g.Site != "site-1" || g.OperationID != p1.ID || g.Action != ports.SiteRetry || g.Actor != retry.Actor ||
			!g.RequestedAt.Equal(retry.RequestedAt) || g.State != ports.CommandRequested || g.Result != "" || !g.FinishedAt.IsZero() {
			t.Errorf("PendingSiteCommands[0] = %+v, want %+v as Requested", g, retry)
		}
		if other, err := s.PendingSiteCommands(ctx, "site-2", 10); err != nil || len(other) != 0 {
			t.Errorf("PendingSiteCommands of another site = %+v, %v; want none", other, err)
		}
		_, err = s.PendingSiteCommands(ctx, "site-1", 0)
		wantErr(t, "PendingSiteCommands with limit 0", err, ports.ErrInvalid)
	})

	t.Run("Finish", func(t *testing.T) {
		done := now.Add(time.Minute)
		if err := s.FinishSiteCommand(ctx, "site-1", retry.ID, ports.CommandApplied, "", done); err != nil {
			t.Fatalf("FinishSiteCommand(Applied): %v", err)
		}
		wantRow(t, s, marked(p1, retry)) // requested until the report comes
		err := s.FinishSiteCommand(ctx, "site-1", retry.ID, ports.CommandRefused, "again", done)
		wantErr(t, "FinishSiteCommand of a finished command", err, ports.ErrConflict)
		err = s.FinishSiteCommand(ctx, "site-2", discard.ID, ports.CommandApplied, "", done)
		wantErr(t, "FinishSiteCommand of another site's command", err, ports.ErrConflict)
		err = s.FinishSiteCommand(ctx, "site-1", storetest.NewID(), ports.CommandApplied, "", done)
		wantErr(t, "FinishSiteCommand of an unknown command", err, ports.ErrNotFound)
		err = s.FinishSiteCommand(ctx, "site-1", discard.ID, ports.CommandRequested, "", done)
		wantErr(t, "FinishSiteCommand to Requested", err, ports.ErrInvalid)

		if err := s.FinishSiteCommand(ctx, "site-1", discard.ID, ports.CommandRefused, "not parked here", done); err != nil {
			t.Fatalf("FinishSiteCommand(Refused): %v", err)
		}
		wantRow(t, s, mirrored("site-1", p2, now)) // a refusal clears the row's request
		h, err := s.SiteCommands(ctx, "site-1", p2.ID)
		if err != nil || len(h) != 1 || h[0].State != ports.CommandRefused || h[0].Result != "not parked here" ||
			!h[0].FinishedAt.Equal(done) || h[0].Actor != discard.Actor {
			t.Errorf("SiteCommands after a refusal = %+v, %v", h, err)
		}
		if got, err := s.PendingSiteCommands(ctx, "site-1", 10); err != nil || len(got) != 1 || got[0].ID != ghost.ID {
			t.Errorf("PendingSiteCommands after two answers = %+v, %v; want the third alone", got, err)
		}
	})

	t.Run("ReportClearsRequest", func(t *testing.T) {
		stillParked := withStatus(p1, ports.OpParked, p1.Version+1, p1.UpdatedAt.Add(time.Second))
		report(t, s, "site-1", now.Add(time.Minute), stillParked)
		m := marked(stillParked, retry)
		m.ReportedAt = now.Add(time.Minute)
		wantRow(t, s, m)
		retried := withStatus(p1, ports.OpRetrying, p1.Version+2, p1.UpdatedAt.Add(2*time.Second))
		retried.RetryCount = 0
		report(t, s, "site-1", now.Add(2*time.Minute), retried)
		wantRow(t, s, mirrored("site-1", retried, now.Add(2*time.Minute)))
	})

	t.Run("History", func(t *testing.T) {
		second := cmd(p1.ID, ports.SiteDiscard, now.Add(time.Hour))
		if err := s.RequestSiteCommands(ctx, []ports.SiteCommand{second}); err != nil {
			t.Fatal(err)
		}
		h, err := s.SiteCommands(ctx, "site-1", p1.ID)
		if err != nil || len(h) != 2 || h[0].ID != retry.ID || h[0].State != ports.CommandApplied || h[1].ID != second.ID {
			t.Errorf("SiteCommands = %+v, %v; want the applied retry, then the discard", h, err)
		}
		if h, err := s.SiteCommands(ctx, "site-2", p1.ID); err != nil || len(h) != 0 {
			t.Errorf("SiteCommands of another site = %+v, %v; want none", h, err)
		}
	})
}
