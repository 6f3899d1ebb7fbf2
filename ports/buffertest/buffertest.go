// Package buffertest is the contract suite of the site buffer port: every
// implementation of [ports.Buffer] runs [Exercise] from one line of its own
// tests:
//
//	func TestContract(t *testing.T) {
//		buffertest.Exercise(t, func(t *testing.T) ports.Buffer {
//			return newEmptyBuffer(t) // for Raft: the elected leader's buffer
//		})
//	}
//
// The suite is organised one file per area of the port (append, remove,
// scan, stats, load, context). Every subtest asks for a fresh buffer and uses
// nothing else, so an implementation may back each one with its own group of
// nodes. The buffer handed to the suite must accept writes: for a replicated
// buffer, the leader's, already elected.
//
// Times handed to the buffer carry a microsecond fraction; times read back
// are compared with [time.Time.Equal], so a buffer need keep no more than
// microsecond precision and no time zone. TypeData is compared byte for byte
// (nil equals empty): the buffer stores it, it never interprets it.
package buffertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// Exercise runs the whole contract against an implementation. open is called
// once per subtest and must return an empty buffer that accepts writes; it
// registers its own cleanup with t.Cleanup.
func Exercise(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Helper()
	t.Run("Append", func(t *testing.T) { exerciseAppend(t, open) })
	t.Run("Remove", func(t *testing.T) { exerciseRemove(t, open) })
	t.Run("Scan", func(t *testing.T) { exerciseScan(t, open) })
	t.Run("Stats", func(t *testing.T) { exerciseStats(t, open) })
	t.Run("Load", func(t *testing.T) { exerciseLoad(t, open) })
	t.Run("Context", func(t *testing.T) { exerciseContext(t, open) })
}

// BaseTime is the fixed instant the suite builds its data around. It carries
// a microsecond fraction, so a buffer that keeps less precision fails.
var BaseTime = time.Date(2025, time.June, 2, 9, 30, 0, 0, time.UTC).Add(123456 * time.Microsecond)

// NewSubmission returns a submission enqueued at enqueuedAt with a fresh
// time-ordered UUID and every field set: list, subject, body, type, JSON
// type data, a priority, an expiry and the site's provenance.
func NewSubmission(enqueuedAt time.Time) ports.Submission {
	id := NewID()
	return ports.Submission{
		ID:                id,
		List:              "ops",
		Subject:           "Pump 7 pressure low — ✓",
		Body:              "Pressure below threshold on pump 7.\nline two\t\"quoted\" ünïcödé",
		Type:              "email",
		TypeData:          json.RawMessage(`{"cc":["x"],"n":1.5}`),
		Priority:          3,
		ExpiresAt:         enqueuedAt.Add(24*time.Hour + 7*time.Microsecond),
		SourceSite:        "site-1",
		SourceInstance:    "instance-1",
		SourceScript:      "alarms/pump.script",
		ExecutionID:       "exec-" + id[:8],
		ParentExecutionID: "parent-" + id[:8],
		SiteEnqueuedAt:    enqueuedAt,
	}
}

// NewSubmissions returns n submissions enqueued one millisecond apart from
// start, as [NewSubmission] builds them.
func NewSubmissions(start time.Time, n int) []ports.Submission {
	ns := make([]ports.Submission, n)
	for i := range ns {
		ns[i] = NewSubmission(start.Add(time.Duration(i) * time.Millisecond))
	}
	return ns
}

// NewID returns a time-ordered (version 7) UUID in canonical text form, as
// a site generates them.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// DiffSubmission lists the fields in which got differs from want, one line
// per field, or nothing when they are equal. Times are compared with
// [time.Time.Equal] (zero equals zero only) and TypeData byte for byte, nil
// equal to empty.
func DiffSubmission(want, got ports.Submission) []string {
	var d []string
	str := func(name, w, g string) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, clip(w), clip(g)))
		}
	}
	tm := func(name string, w, g time.Time) {
		if !sameTime(w, g) {
			d = append(d, fmt.Sprintf("%s: want %s, got %s", name, fmtTime(w), fmtTime(g)))
		}
	}
	str("ID", want.ID, got.ID)
	str("List", want.List, got.List)
	str("Subject", want.Subject, got.Subject)
	str("Body", want.Body, got.Body)
	str("Type", want.Type, got.Type)
	if !bytes.Equal(want.TypeData, got.TypeData) {
		d = append(d, fmt.Sprintf("TypeData: want %s, got %s", want.TypeData, got.TypeData))
	}
	if want.Priority != got.Priority {
		d = append(d, fmt.Sprintf("Priority: want %d, got %d", want.Priority, got.Priority))
	}
	tm("ExpiresAt", want.ExpiresAt, got.ExpiresAt)
	str("SourceSite", want.SourceSite, got.SourceSite)
	str("SourceInstance", want.SourceInstance, got.SourceInstance)
	str("SourceScript", want.SourceScript, got.SourceScript)
	str("ExecutionID", want.ExecutionID, got.ExecutionID)
	str("ParentExecutionID", want.ParentExecutionID, got.ParentExecutionID)
	tm("SiteEnqueuedAt", want.SiteEnqueuedAt, got.SiteEnqueuedAt)
	return d
}

// sameTime reports whether two times are the same instant; zero equals zero
// only.
func sameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	return a.Equal(b)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// clip shortens long strings (64 KiB bodies) in failure messages.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:60], len(s))
}

// --- helpers shared by the areas ---------------------------------------------

// mustAppend appends ns or fails the test now.
func mustAppend(t *testing.T, b ports.Buffer, ns ...ports.Submission) {
	t.Helper()
	if err := b.Append(t.Context(), ns); err != nil {
		t.Fatalf("Append of %d: %v", len(ns), err)
	}
}

// mustRemove removes ids or fails the test now.
func mustRemove(t *testing.T, b ports.Buffer, ids ...string) {
	t.Helper()
	if err := b.Remove(t.Context(), ids); err != nil {
		t.Fatalf("Remove of %d: %v", len(ids), err)
	}
}

// scanAll reads the whole buffer in pages of page items, checking that every
// page is in increasing Seq order and no longer than asked.
func scanAll(t *testing.T, b ports.Buffer, page int) []ports.Buffered {
	t.Helper()
	var all []ports.Buffered
	var after uint64
	for {
		got, err := b.Scan(t.Context(), after, page)
		if err != nil {
			t.Fatalf("Scan(after %d, limit %d): %v", after, page, err)
		}
		if len(got) > page {
			t.Fatalf("Scan(after %d, limit %d) returned %d items", after, page, len(got))
		}
		for _, it := range got {
			if it.Seq <= after {
				t.Fatalf("Scan(after %d): Seq %d (id %s) is not increasing", after, it.Seq, it.ID)
			}
			after = it.Seq
		}
		all = append(all, got...)
		if len(got) == 0 {
			return all
		}
	}
}

// requireContents fails the test unless the buffer holds exactly want, in
// that order, with every field intact and Seq strictly increasing.
func requireContents(t *testing.T, b ports.Buffer, want []ports.Submission) []ports.Buffered {
	t.Helper()
	got := scanAll(t, b, 1000)
	if len(got) != len(want) {
		t.Fatalf("buffer holds %d notifications, want %d (ids %s)", len(got), len(want), ids(got))
	}
	for i := range want {
		if d := DiffSubmission(want[i], got[i].Submission); len(d) > 0 {
			t.Fatalf("item %d (Seq %d): notification %s differs:\n  %s",
				i, got[i].Seq, want[i].ID, strings.Join(d, "\n  "))
		}
	}
	return got
}

// requireCount fails the test unless Stats reports n notifications.
func requireCount(t *testing.T, b ports.Buffer, n int64) ports.BufferStats {
	t.Helper()
	st, err := b.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Count != n {
		t.Fatalf("Stats.Count = %d, want %d", st.Count, n)
	}
	return st
}

// ids lists the ids of items, for messages; long lists are cut.
func ids(items []ports.Buffered) string {
	var s []string
	for i, it := range items {
		if i == 5 {
			s = append(s, fmt.Sprintf("… %d more", len(items)-5))
			break
		}
		s = append(s, it.ID)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// idsOf returns the ids of ns.
func idsOf(ns []ports.Submission) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// contains calls Contains or fails the test now.
func contains(t *testing.T, b ports.Buffer, ids ...string) map[string]bool {
	t.Helper()
	got, err := b.Contains(t.Context(), ids)
	if err != nil {
		t.Fatalf("Contains: %v", err)
	}
	return got
}

// cancelled returns a context that is already cancelled.
func cancelled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
