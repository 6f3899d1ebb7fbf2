// Package opstoretest is the contract suite of the site's store of cached
// operations: every implementation of [ports.OpStore] runs [Exercise] from
// one line of its own tests:
//
//	func TestOpStoreContract(t *testing.T) {
//		opstoretest.Exercise(t, opstoretest.Harness{
//			Open: func(t *testing.T) ports.OpStore { return newEmptyStore(t) },
//		})
//	}
//
// The suite is organised one file per area of the port (put, get and due,
// list, purge, stats, the change feed, availability). Every subtest asks for a fresh store and
// uses nothing else, so an implementation may back each one with its own
// group of nodes. The store handed to the suite must accept writes: for a
// replicated store, the leader's, already elected.
//
// Times handed to the store carry a microsecond fraction and a time zone
// other than UTC; times read back must be the same instants, in UTC. A
// store need keep no more than microsecond precision. Payload bytes (a
// call's JSON params, a write's SQL text and JSON args) are compared byte
// for byte, nil equal to empty: the store keeps them, it never interprets
// them. A limit below 1 (Due, List, Purge) is ports.ErrInvalid, and so is a
// change with an empty id, an unknown kind, status or from-status.
package opstoretest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// Harness is what the suite needs of an implementation.
type Harness struct {
	// Open is called once per subtest and returns an empty store that
	// accepts writes; it registers its own cleanup with t.Cleanup.
	Open func(t *testing.T) ports.OpStore

	// Refusing, when set, returns a view of s's data that cannot commit:
	// for a replicated store, a follower that has applied everything s
	// committed; for one in memory, s itself made unavailable. Its writes
	// must fail with ErrUnavailable and change nothing, and its reads
	// answer from its copy. When nil, that area is skipped.
	Refusing func(t *testing.T, s ports.OpStore) ports.OpStore

	// Replicas, when set, returns every copy of s's data (for a
	// replicated store, each node's, s's own included), each having
	// applied everything s committed: their change feeds must be the same,
	// positions and epoch included. When nil, that subtest is skipped.
	Replicas func(t *testing.T, s ports.OpStore) []ports.OpStore
}

// Exercise runs the whole contract against an implementation.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	t.Run("Put", func(t *testing.T) { exercisePut(t, h.Open) })
	t.Run("Get", func(t *testing.T) { exerciseGet(t, h.Open) })
	t.Run("Due", func(t *testing.T) { exerciseDue(t, h.Open) })
	t.Run("List", func(t *testing.T) { exerciseList(t, h.Open) })
	t.Run("Purge", func(t *testing.T) { exercisePurge(t, h.Open) })
	t.Run("Stats", func(t *testing.T) { exerciseStats(t, h.Open) })
	t.Run("Changes", func(t *testing.T) { exerciseChanges(t, h) })
	t.Run("Unavailable", func(t *testing.T) {
		if h.Refusing == nil {
			t.Skip("the implementation has no way to refuse writes here")
		}
		exerciseUnavailable(t, h)
	})
}

// BaseTime is the fixed instant the suite builds its data around. It carries
// a microsecond fraction, so a store that keeps less precision fails.
var BaseTime = time.Date(2025, time.June, 2, 9, 30, 0, 0, time.UTC).Add(654321 * time.Microsecond)

// zone is a time zone other than UTC, for the times the suite hands over.
var zone = time.FixedZone("plant", 2*3600+30*60)

// NewID returns a time-ordered (version 7) UUID in canonical text form, as
// a site's clients make them.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// NewCall returns a Pending call made at createdAt with every field set:
// target and method, a last error, a next attempt one second later, the
// script's provenance and a JSON params object with nested, unicode and
// escaped members. Its times are in a zone other than UTC.
func NewCall(createdAt time.Time) ports.Operation {
	id := NewID()
	return ports.Operation{
		ID:                id,
		Kind:              ports.OpCall,
		Target:            "erp",
		Method:            "postReading",
		Status:            ports.OpPending,
		LastError:         "HTTP 503: Service Unavailable — «retry»",
		NextAttemptAt:     createdAt.Add(time.Second + 7*time.Microsecond).In(zone),
		SourceInstance:    "pump-7",
		SourceScript:      "scripts/reading.script",
		ExecutionID:       "exec-" + id[:8],
		ParentExecutionID: "parent-" + id[:8],
		CreatedAt:         createdAt.In(zone),
		UpdatedAt:         createdAt.Add(3 * time.Microsecond).In(zone),
		Payload: ports.OpPayload{
			Params: json.RawMessage(`{"tag":"PT-7","value":4.25,"unit":"bar","note":"ünïcödé ✓ \"q\"\n","nested":{"a":[1,null,true]}}`),
		},
	}
}

// NewWrite returns a Pending database write made at createdAt with every
// field set but Method: SQL text with unicode, quotes and a newline, and a
// JSON array of args of every scalar kind.
func NewWrite(createdAt time.Time) ports.Operation {
	op := NewCall(createdAt)
	op.Kind = ports.OpWrite
	op.Target = "plantdb"
	op.Method = ""
	op.LastError = "dial tcp 10.0.0.5:5432: connection refused"
	op.Payload = ports.OpPayload{
		SQL:  "INSERT INTO readings (tag, value, note)\nVALUES ($1, $2, 'Ω ✓ ''quoted''')",
		Args: json.RawMessage(`["PT-7",4.25,null,true,-12,"ü"]`),
	}
	return op
}

// Insert returns the change that stores op for the first time.
func Insert(op ports.Operation) ports.OpChange { return ports.OpChange{From: "", Op: op} }

// Move returns the change that makes op's stored row, in status from, op.
func Move(from ports.OpStatus, op ports.Operation) ports.OpChange {
	return ports.OpChange{From: from, Op: op}
}

// DiffOperation lists the fields in which got differs from want, one line
// per field, or nothing when they are equal. Times are compared with
// [time.Time.Equal] (zero equals zero only), payload bytes byte for byte,
// nil equal to empty. Version is compared too.
func DiffOperation(want, got ports.Operation) []string {
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
	raw := func(name string, w, g []byte) {
		if !bytes.Equal(w, g) {
			d = append(d, fmt.Sprintf("%s: want %s, got %s", name, clip(string(w)), clip(string(g))))
		}
	}
	str("ID", want.ID, got.ID)
	str("Kind", string(want.Kind), string(got.Kind))
	str("Target", want.Target, got.Target)
	str("Method", want.Method, got.Method)
	str("Status", string(want.Status), string(got.Status))
	if want.RetryCount != got.RetryCount {
		d = append(d, fmt.Sprintf("RetryCount: want %d, got %d", want.RetryCount, got.RetryCount))
	}
	str("LastError", want.LastError, got.LastError)
	tm("NextAttemptAt", want.NextAttemptAt, got.NextAttemptAt)
	str("SourceInstance", want.SourceInstance, got.SourceInstance)
	str("SourceScript", want.SourceScript, got.SourceScript)
	str("ExecutionID", want.ExecutionID, got.ExecutionID)
	str("ParentExecutionID", want.ParentExecutionID, got.ParentExecutionID)
	tm("CreatedAt", want.CreatedAt, got.CreatedAt)
	tm("UpdatedAt", want.UpdatedAt, got.UpdatedAt)
	tm("TerminalAt", want.TerminalAt, got.TerminalAt)
	raw("Payload.Params", want.Payload.Params, got.Payload.Params)
	str("Payload.SQL", want.Payload.SQL, got.Payload.SQL)
	raw("Payload.Args", want.Payload.Args, got.Payload.Args)
	if want.Version != got.Version {
		d = append(d, fmt.Sprintf("Version: want %d, got %d", want.Version, got.Version))
	}
	return d
}

// utcTimes lists the non-zero times of op that are not in UTC.
func utcTimes(op ports.Operation) []string {
	var d []string
	for name, t := range map[string]time.Time{
		"NextAttemptAt": op.NextAttemptAt, "CreatedAt": op.CreatedAt,
		"UpdatedAt": op.UpdatedAt, "TerminalAt": op.TerminalAt,
	} {
		if !t.IsZero() && t.Location() != time.UTC {
			d = append(d, fmt.Sprintf("%s is in %s, want UTC", name, t.Location()))
		}
	}
	slices.Sort(d)
	return d
}

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

func clip(s string) string {
	if len(s) <= 120 {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:100], len(s))
}

// --- helpers shared by the areas ---------------------------------------------

// put commits changes and fails the test now on an error or when the
// applied flags are not want.
func put(t *testing.T, s ports.OpStore, want []bool, changes ...ports.OpChange) {
	t.Helper()
	got, err := s.Put(t.Context(), changes)
	if err != nil {
		t.Fatalf("Put of %d changes: %v", len(changes), err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Put of %d changes applied %v, want %v", len(changes), got, want)
	}
}

// insert stores ops, every one new.
func insert(t *testing.T, s ports.OpStore, ops ...ports.Operation) {
	t.Helper()
	changes := make([]ports.OpChange, len(ops))
	want := make([]bool, len(ops))
	for i, op := range ops {
		changes[i], want[i] = Insert(op), true
	}
	put(t, s, want, changes...)
}

// get reads one operation or fails the test now.
func get(t *testing.T, s ports.OpStore, id string) ports.Operation {
	t.Helper()
	op, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return op
}

// requireStored fails the test unless the store holds want (its Version
// included) with its times in UTC.
func requireStored(t *testing.T, s ports.OpStore, want ports.Operation) ports.Operation {
	t.Helper()
	got := get(t, s, want.ID)
	if d := append(DiffOperation(want, got), utcTimes(got)...); len(d) > 0 {
		t.Fatalf("operation %s differs:\n  %s", want.ID, strings.Join(d, "\n  "))
	}
	return got
}

// stored is op as the store keeps it after its version-th change.
func stored(op ports.Operation, version uint64) ports.Operation {
	op.Version = version
	if op.Status.Terminal() {
		op.Payload = ports.OpPayload{}
	}
	return op
}

// idList returns the ids of ops, for messages and comparisons.
func idList(ops []ports.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.ID
	}
	return out
}

// cancelled returns a context that is already cancelled.
func cancelled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
