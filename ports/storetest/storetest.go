// Package storetest is the contract suite of the store port: every adapter of
// [ports.Store] and [ports.AuditLog] runs [Exercise] against its real backend
// (memory, SQLite, PostgreSQL, MS SQL) from one line of its own tests:
//
//	func TestContract(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T) storetest.Harness {
//			s := newEmptyStore(t)
//			return storetest.Harness{Store: s, Audit: s}
//		})
//	}
//
// The suite is organised one file per area of the port (insert, claim, record,
// release of a node's leases, query, kpi, transition, purge, audit), as
// River's riverdrivertest is. Every subtest asks for a fresh harness and uses
// nothing else, so an adapter may back each harness with its own database or
// schema.
//
// Times handed to the store are fixed and truncated to the microsecond; times
// read back are compared with [time.Time.Equal] after [time.Time.UTC], so a
// store need keep no more than microsecond precision and no time zone.
package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// Harness is what an adapter hands the suite: a fresh, empty store and its
// audit log.
type Harness struct {
	Store ports.Store
	Audit ports.AuditLog
}

// Exercise runs the whole contract against the adapter. newHarness is called
// once per subtest and must return an empty store.
func Exercise(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	t.Run("Insert", func(t *testing.T) { exerciseInsert(t, newHarness) })
	t.Run("Claim", func(t *testing.T) { exerciseClaim(t, newHarness) })
	t.Run("Record", func(t *testing.T) { exerciseRecord(t, newHarness) })
	t.Run("ReleaseNode", func(t *testing.T) { exerciseReleaseNode(t, newHarness) })
	t.Run("Query", func(t *testing.T) { exerciseQuery(t, newHarness) })
	t.Run("KPIs", func(t *testing.T) { exerciseKPIs(t, newHarness) })
	t.Run("Throughput", func(t *testing.T) { exerciseThroughput(t, newHarness) })
	t.Run("Transition", func(t *testing.T) { exerciseTransition(t, newHarness) })
	t.Run("Purge", func(t *testing.T) { exercisePurge(t, newHarness) })
	t.Run("AuditLog", func(t *testing.T) { exerciseAudit(t, newHarness) })
}

// BaseTime is the fixed instant the suite builds its data around. It carries
// a microsecond fraction, so a store that keeps less precision fails.
var BaseTime = time.Date(2025, time.June, 2, 9, 30, 0, 0, time.UTC).Add(123456 * time.Microsecond)

// NewNotification returns a valid Pending notification created (and last
// updated) at createdAt, with a random UUID, an e-mail type, a list, a subject,
// a body and site provenance. Delivery times, TypeData, lease and expiry are
// unset. Callers adjust the fields a test is about.
func NewNotification(createdAt time.Time) ports.Notification {
	id := NewID()
	return ports.Notification{
		ID:                id,
		Type:              "email",
		List:              "ops",
		Subject:           "Pump 7 pressure low",
		Body:              "Pressure below threshold on pump 7.",
		Status:            ports.StatusPending,
		SourceSite:        "site-1",
		SourceInstance:    "instance-1",
		SourceScript:      "alarms/pump.script",
		ExecutionID:       "exec-" + id[:8],
		ParentExecutionID: "parent-" + id[:8],
		SiteEnqueuedAt:    createdAt.Add(-1500 * time.Millisecond),
		CreatedAt:         createdAt,
		UpdatedAt:         createdAt,
	}
}

// NewTargetStates returns the fate of four targets as an attempt at at
// leaves them, one of each status: delivered (its second attempt), retrying
// (an error text with quotes and non-ASCII), failed, and dropped (never
// attempted, zero times); the second is a reference (env:NAME). Times carry
// microsecond fractions.
func NewTargetStates(at time.Time) []ports.TargetState {
	return []ports.TargetState{
		{Target: "a@example.test", Status: ports.TargetDelivered, Attempts: 2,
			LastAttemptAt: at.Add(-time.Second + 3*time.Microsecond), DeliveredAt: at.Add(-time.Second + 4*time.Microsecond)},
		{Target: "env:OPS_HOOK", Status: ports.TargetRetrying, Attempts: 3,
			LastError: "http: 503 \"busy\" — réessayez", LastAttemptAt: at.Add(7 * time.Microsecond)},
		{Target: "b@example.test", Status: ports.TargetFailed, Attempts: 1,
			LastError: "smtp: 550 5.1.1 no such user", LastAttemptAt: at.Add(-time.Minute + 9*time.Microsecond)},
		{Target: "old@example.test", Status: ports.TargetDropped},
	}
}

// NewID returns a random UUID in canonical lowercase text form.
func NewID() string { return uuid.NewString() }

// DiffNotification lists the fields in which got differs from want, one line
// per field, or nothing when they are equal. Times are compared with
// [time.Time.Equal] (the times of Targets too), nil and empty
// ResolvedTargets are equal, so are nil and empty Targets, and TypeData is
// compared as JSON values (key order and white space do not matter; nil and
// empty are equal).
func DiffNotification(want, got ports.Notification) []string {
	var d []string
	str := func(name, w, g string) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, w, g))
		}
	}
	num := func(name string, w, g int) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %d, got %d", name, w, g))
		}
	}
	tm := func(name string, w, g time.Time) {
		if !sameTime(w, g) {
			d = append(d, fmt.Sprintf("%s: want %s, got %s", name, fmtTime(w), fmtTime(g)))
		}
	}
	str("ID", want.ID, got.ID)
	str("Type", want.Type, got.Type)
	str("List", want.List, got.List)
	str("Subject", want.Subject, got.Subject)
	str("Body", want.Body, got.Body)
	if !sameJSON(want.TypeData, got.TypeData) {
		d = append(d, fmt.Sprintf("TypeData: want %s, got %s", want.TypeData, got.TypeData))
	}
	num("Priority", want.Priority, got.Priority)
	str("Status", string(want.Status), string(got.Status))
	num("RetryCount", want.RetryCount, got.RetryCount)
	str("LastError", want.LastError, got.LastError)
	if !sameStrings(want.ResolvedTargets, got.ResolvedTargets) {
		d = append(d, fmt.Sprintf("ResolvedTargets: want %q, got %q", want.ResolvedTargets, got.ResolvedTargets))
	}
	d = append(d, diffTargetStates(want.Targets, got.Targets)...)
	str("SourceSite", want.SourceSite, got.SourceSite)
	str("SourceInstance", want.SourceInstance, got.SourceInstance)
	str("SourceScript", want.SourceScript, got.SourceScript)
	str("ExecutionID", want.ExecutionID, got.ExecutionID)
	str("ParentExecutionID", want.ParentExecutionID, got.ParentExecutionID)
	tm("SiteEnqueuedAt", want.SiteEnqueuedAt, got.SiteEnqueuedAt)
	tm("CreatedAt", want.CreatedAt, got.CreatedAt)
	tm("UpdatedAt", want.UpdatedAt, got.UpdatedAt)
	tm("LastAttemptAt", want.LastAttemptAt, got.LastAttemptAt)
	tm("NextAttemptAt", want.NextAttemptAt, got.NextAttemptAt)
	tm("DeliveredAt", want.DeliveredAt, got.DeliveredAt)
	tm("ExpiresAt", want.ExpiresAt, got.ExpiresAt)
	str("ClaimedBy", want.ClaimedBy, got.ClaimedBy)
	tm("ClaimedUntil", want.ClaimedUntil, got.ClaimedUntil)
	return d
}

// diffTargetStates lists the differences between two lists of target
// states, target by target; nil and empty are equal.
func diffTargetStates(want, got []ports.TargetState) []string {
	if len(want) != len(got) {
		return []string{fmt.Sprintf("Targets: want %d, got %d: want %s, got %s",
			len(want), len(got), fmtTargetStates(want), fmtTargetStates(got))}
	}
	var d []string
	for i, w := range want {
		g := got[i]
		if w.Target != g.Target || w.Status != g.Status || w.Attempts != g.Attempts || w.LastError != g.LastError ||
			!sameTime(w.LastAttemptAt, g.LastAttemptAt) || !sameTime(w.DeliveredAt, g.DeliveredAt) {
			d = append(d, fmt.Sprintf("Targets[%d]: want %s, got %s", i, fmtTargetState(w), fmtTargetState(g)))
		}
	}
	return d
}

func fmtTargetState(s ports.TargetState) string {
	return fmt.Sprintf("{%q %s attempts %d error %q last attempt %s delivered %s}",
		s.Target, s.Status, s.Attempts, s.LastError, fmtTime(s.LastAttemptAt), fmtTime(s.DeliveredAt))
}

func fmtTargetStates(ts []ports.TargetState) string {
	out := make([]string, len(ts))
	for i, s := range ts {
		out[i] = fmtTargetState(s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// sameTime reports whether two times are the same instant; zero equals zero
// only.
func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	return a.UTC().Equal(b.UTC())
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// sameStrings compares two string slices, nil equal to empty.
func sameStrings(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return slices.Equal(a, b)
}

// sameJSON compares two JSON documents as values, nil equal to empty.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == 0 && len(b) == 0
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		var ca, cb bytes.Buffer
		if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
			return bytes.Equal(a, b)
		}
		return bytes.Equal(ca.Bytes(), cb.Bytes())
	}
	return reflect.DeepEqual(va, vb)
}

// --- helpers shared by the areas ---------------------------------------------

// requireSame fails the test now when got differs from want.
func requireSame(t *testing.T, what string, want, got ports.Notification) {
	t.Helper()
	if d := DiffNotification(want, got); len(d) > 0 {
		t.Fatalf("%s: row %s differs:\n  %s", what, want.ID, strings.Join(d, "\n  "))
	}
}

// checkSame reports when got differs from want and lets the test go on.
func checkSame(t *testing.T, what string, want, got ports.Notification) {
	t.Helper()
	if d := DiffNotification(want, got); len(d) > 0 {
		t.Errorf("%s: row %s differs:\n  %s", what, want.ID, strings.Join(d, "\n  "))
	}
}

func mustInsert(t *testing.T, s ports.Store, ns ...ports.Notification) {
	t.Helper()
	// Insert in modest batches, as the core does, so that adapters with a
	// bound on statement parameters are not tested on that here.
	const batch = 100
	for len(ns) > 0 {
		n := min(batch, len(ns))
		inserted, err := s.Insert(t.Context(), ns[:n])
		if err != nil {
			t.Fatalf("Insert: %v", err)
		}
		if len(inserted) != n {
			t.Fatalf("Insert of %d fresh rows reported %d inserted", n, len(inserted))
		}
		ns = ns[n:]
	}
}

func mustGet(t *testing.T, s ports.Store, id string) ports.Notification {
	t.Helper()
	n, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return n
}

func mustClaim(t *testing.T, s ports.Store, req ports.ClaimRequest) []ports.Notification {
	t.Helper()
	ns, err := s.Claim(t.Context(), req)
	if err != nil {
		t.Fatalf("Claim(%s): %v", req.Owner, err)
	}
	return ns
}

func mustRecord(t *testing.T, s ports.Store, owner string, us ...ports.Update) (lost []string) {
	t.Helper()
	lost, err := s.Record(t.Context(), owner, us)
	if err != nil {
		t.Fatalf("Record(%s): %v", owner, err)
	}
	return lost
}

func mustCount(t *testing.T, s ports.Store, f ports.Filter) int64 {
	t.Helper()
	n, err := s.Count(t.Context(), f)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

// checkCountByStatus fails unless CountByStatus of f is want: the count of
// each status some matching row has, and no other status; and, capped at
// 1, 2 and 3, the same count where it is within the cap and a count above
// the cap (but not above want) where it is not.
func checkCountByStatus(t *testing.T, s ports.Store, f ports.Filter, want map[ports.Status]int64) {
	t.Helper()
	got, err := s.CountByStatus(t.Context(), f, 0)
	if err != nil {
		t.Fatalf("CountByStatus: %v", err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("CountByStatus = %v, want %v", got, want)
	}
	for limit := int64(1); limit <= 3; limit++ {
		checkCappedCountByStatus(t, s, f, limit, want)
	}
}

// checkCappedCountByStatus fails unless CountByStatus of f capped at limit
// agrees with the exact counts want: equal to a count of at most limit,
// above limit and not above a greater count, absent where want is.
func checkCappedCountByStatus(t *testing.T, s ports.Store, f ports.Filter, limit int64, want map[ports.Status]int64) {
	t.Helper()
	got, err := s.CountByStatus(t.Context(), f, limit)
	if err != nil {
		t.Fatalf("CountByStatus capped at %d: %v", limit, err)
	}
	for st, n := range got {
		if _, ok := want[st]; !ok {
			t.Errorf("CountByStatus capped at %d counts %d %s rows, want none", limit, n, st)
		}
	}
	for st, n := range want {
		g, ok := got[st]
		switch {
		case !ok:
			t.Errorf("CountByStatus capped at %d has no %s count, want %d", limit, st, min(n, limit+1))
		case n <= limit && g != n:
			t.Errorf("CountByStatus capped at %d counts %d %s rows, want %d", limit, g, st, n)
		case n > limit && (g <= limit || g > n):
			t.Errorf("CountByStatus capped at %d counts %d %s rows of %d, want more than %d", limit, g, st, n, limit)
		}
	}
}

func requireNotFound(t *testing.T, s ports.Store, id string) {
	t.Helper()
	_, err := s.Get(t.Context(), id)
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get(%s) = %v, want an error wrapping ports.ErrNotFound", id, err)
	}
}

// idsOf returns the IDs of ns in order.
func idsOf(ns []ports.Notification) []string {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	return ids
}

// sortedIDs returns n random UUIDs in ascending order.
func sortedIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = NewID()
	}
	slices.Sort(ids)
	return ids
}

// checkIDs reports when got is not exactly want, in order.
func checkIDs(t *testing.T, what string, want, got []string) {
	t.Helper()
	if !sameStrings(want, got) {
		t.Errorf("%s:\n  want %d ids %v\n  got  %d ids %v", what, len(want), want, len(got), got)
	}
}

// checkIDSet reports when got does not hold the ids of want exactly once
// each, in any order.
func checkIDSet(t *testing.T, what string, want, got []string) {
	t.Helper()
	w := slices.Clone(want)
	g := slices.Clone(got)
	slices.Sort(w)
	slices.Sort(g)
	if !sameStrings(w, g) {
		t.Errorf("%s:\n  want (any order) %d ids %v\n  got  %d ids %v", what, len(w), w, len(g), g)
	}
}

// released returns n without a lease.
func released(n ports.Notification) ports.Notification {
	n.ClaimedBy = ""
	n.ClaimedUntil = time.Time{}
	return n
}
