// Package centraltest is the contract suite of [ports.Central], central as a
// site sees it. Whatever implements it — core.Service in process, or
// adapters/sitelink's Client talking to a sitelink Server over the network —
// runs [Exercise] from one line of its own tests:
//
//	func TestContract(t *testing.T) {
//		centraltest.Exercise(t, func(t *testing.T) centraltest.Target {
//			store := memstore.New()
//			svc := newService(t, store, centraltest.Lists) // its directory knows Lists
//			return centraltest.Target{Central: svc, Stored: centraltest.FromStore(store)}
//		})
//	}
//
// Every subtest asks for a fresh target and uses nothing else. The suite
// assumes central's default limits: at most [MaxBatch] submissions a batch
// and a subject of at most [MaxSubjectBytes] bytes; and a directory that
// knows the lists in [Lists] and no list named [UnknownList].
//
// Times handed to central carry a microsecond fraction and no finer one;
// times read back are compared with [time.Time.Equal], so an implementation
// needs to keep exactly microsecond precision.
package centraltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// The limits of central's default configuration that the suite relies on.
const (
	MaxBatch        = 1000
	MaxSubjectBytes = 255
)

// Lists are the lists the central under test must know: the list decides a
// notification's type.
var Lists = []ports.List{
	{Name: "ops", Type: "email", Targets: []string{"ops@example.com"}},
	{Name: "hooks", Type: "webhook", Targets: []string{"https://hooks.example.com/x"}},
}

// UnknownList names a list the central under test must not know.
const UnknownList = "no-such-list"

// listType is the type of a list of Lists, "" for any other.
func listType(name string) string {
	for _, l := range Lists {
		if l.Name == name {
			return l.Type
		}
	}
	return ""
}

// Target is what an implementation hands the suite.
type Target struct {
	// Central is the implementation under test, empty of notifications.
	Central ports.Central
	// Site is the identity the caller holds. When set, the implementation
	// must reject every submission whose SourceSite is another site's. ""
	// means a trusted local caller, whose submissions may carry any
	// SourceSite.
	Site string
	// Stored reads the row central stored under id directly from central's
	// store (not through Central), and reports false when there is none.
	Stored func(t *testing.T, id string) (ports.Notification, bool)
	// Trusted is the same central called as a trusted local caller (in
	// process, no site), through which the suite stores other sites'
	// notifications. Required when Site is set.
	Trusted ports.Central
}

// Getter is the part of ports.Store that [FromStore] needs.
type Getter interface {
	Get(ctx context.Context, id string) (ports.Notification, error)
}

// FromStore returns a Target.Stored that reads from s: ErrNotFound is "not
// stored"; any other error fails the test.
func FromStore(s Getter) func(t *testing.T, id string) (ports.Notification, bool) {
	return func(t *testing.T, id string) (ports.Notification, bool) {
		t.Helper()
		n, err := s.Get(t.Context(), id)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return ports.Notification{}, false
		case err != nil:
			t.Fatalf("Get(%q) from central's store: %v", id, err)
		}
		return n, true
	}
}

// Exercise runs the whole contract. open is called once per subtest and must
// return a central that stores nothing yet.
func Exercise(t *testing.T, open func(t *testing.T) Target) {
	t.Helper()
	t.Run("SubmitAcksAndStores", func(t *testing.T) { submitAcksAndStores(t, open(t)) })
	t.Run("ZeroTimesStayZero", func(t *testing.T) { zeroTimesStayZero(t, open(t)) })
	t.Run("RepeatedSubmitStoresOnce", func(t *testing.T) { repeatedSubmit(t, open(t)) })
	t.Run("SourceSite", func(t *testing.T) { sourceSite(t, open(t)) })
	t.Run("InvalidRowsRejected", func(t *testing.T) { invalidRows(t, open(t)) })
	t.Run("EmptyBatch", func(t *testing.T) { emptyBatch(t, open(t)) })
	t.Run("BatchAtLimit", func(t *testing.T) { batchAtLimit(t, open(t)) })
	t.Run("BatchOverLimit", func(t *testing.T) { batchOverLimit(t, open(t)) })
	t.Run("Status", func(t *testing.T) { statuses(t, open(t)) })
	t.Run("StatusOfOwnRowsOnly", func(t *testing.T) { ownStatuses(t, open(t)) })
	t.Run("IDOfAnotherSite", func(t *testing.T) { idOfAnotherSite(t, open(t)) })
	t.Run("TheListDecidesTheType", func(t *testing.T) { listDecidesType(t, open(t)) })
	t.Run("PriorityRange", func(t *testing.T) { priorityRange(t, open(t)) })
}

// BaseTime is the instant the suite's times are built around. It carries a
// microsecond fraction, so an implementation that keeps less fails.
var BaseTime = time.Date(2026, time.February, 3, 14, 15, 16, 0, time.UTC).Add(789012 * time.Microsecond)

// NewSubmission returns a valid submission from site with a random id, to
// the email list "ops" of [Lists] (its Type set to the list's, as a site may),
// a subject, a body and provenance, enqueued at BaseTime. Callers adjust the
// fields a test is about.
func NewSubmission(site string) ports.Submission {
	id := uuid.NewString()
	return ports.Submission{
		ID:                id,
		Type:              "email",
		List:              "ops",
		Subject:           "Pump 7 pressure low",
		Body:              "Pressure below threshold on pump 7.",
		SourceSite:        site,
		SourceInstance:    "plc-12",
		SourceScript:      "alarms/pump7.script",
		ExecutionID:       "exec-" + id[:8],
		ParentExecutionID: "parent-" + id[:8],
		SiteEnqueuedAt:    BaseTime,
	}
}

// siteOf is the SourceSite the suite stamps on its submissions.
func siteOf(tg Target) string {
	if tg.Site != "" {
		return tg.Site
	}
	return "site-contract"
}

func submitAcksAndStores(t *testing.T, tg Target) {
	site := siteOf(tg)
	full := NewSubmission(site)
	full.List, full.Type = "hooks", "webhook"
	full.Subject = "Pump 7 — pressure low ✓ 100%_done"
	full.Body = "line one\nline two\ttab \"quoted\" ünïcödé \\ backslash 🚰"
	full.TypeData = json.RawMessage(`{"url":"https://hooks.example.test/x","n":[1,2.5,true,null,"s"]}`)
	full.Priority = ports.MaxPriority
	full.SiteEnqueuedAt = BaseTime.Add(-90*time.Second + 7*time.Microsecond)
	full.ExpiresAt = BaseTime.Add(24*time.Hour + 5*time.Microsecond)
	negative := NewSubmission(site)
	negative.Priority = ports.MinPriority
	negative.Type = "" // the list gives it
	// Before 1970: negative Unix times survive too.
	negative.SiteEnqueuedAt = time.Date(1969, time.July, 20, 20, 17, 40, 0, time.UTC).Add(123 * time.Microsecond)
	plain := NewSubmission(site)
	batch := []ports.Submission{full, negative, plain}

	res := mustSubmit(t, tg, batch)
	checkIDSet(t, "Accepted", ids(batch), res.Accepted)
	if len(res.Rejected) > 0 {
		t.Errorf("Rejected = %v, want none", res.Rejected)
	}
	for _, s := range batch {
		n := mustBeStored(t, tg, s.ID)
		checkStored(t, s, n)
		if n.Status != ports.StatusPending {
			t.Errorf("row %s: Status = %s, want %s", s.ID, n.Status, ports.StatusPending)
		}
	}
}

func zeroTimesStayZero(t *testing.T, tg Target) {
	s := NewSubmission(siteOf(tg))
	s.SiteEnqueuedAt = time.Time{}
	s.SourceInstance, s.SourceScript, s.ExecutionID, s.ParentExecutionID = "", "", "", ""
	res := mustSubmit(t, tg, []ports.Submission{s})
	checkIDSet(t, "Accepted", []string{s.ID}, res.Accepted)
	n := mustBeStored(t, tg, s.ID)
	checkStored(t, s, n)
	if !n.SiteEnqueuedAt.IsZero() || !n.ExpiresAt.IsZero() {
		t.Errorf("SiteEnqueuedAt = %s, ExpiresAt = %s; want both zero", n.SiteEnqueuedAt, n.ExpiresAt)
	}
	if len(n.TypeData) != 0 {
		t.Errorf("TypeData = %s, want none", n.TypeData)
	}
}

func repeatedSubmit(t *testing.T, tg Target) {
	site := siteOf(tg)
	batch := []ports.Submission{NewSubmission(site), NewSubmission(site)}
	first := mustSubmit(t, tg, batch)
	checkIDSet(t, "Accepted (first Submit)", ids(batch), first.Accepted)
	stored := mustBeStored(t, tg, batch[0].ID)

	// The same batch again, as a site resends after a lost answer; the
	// first row's content changed, to show the stored row is not replaced.
	again := slices.Clone(batch)
	again[0].Subject = "a resend never overwrites"
	second := mustSubmit(t, tg, again)
	checkIDSet(t, "Accepted (repeated Submit)", ids(batch), second.Accepted)
	if len(second.Rejected) > 0 {
		t.Errorf("Rejected on repeat = %v, want none", second.Rejected)
	}
	n := mustBeStored(t, tg, batch[0].ID)
	if n.Subject != batch[0].Subject {
		t.Errorf("Subject after a repeated Submit = %q, want the first one %q: the row was stored twice", n.Subject, batch[0].Subject)
	}
	if !n.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("CreatedAt after a repeated Submit = %s, want %s: the row was stored twice", n.CreatedAt, stored.CreatedAt)
	}
	mustBeStored(t, tg, batch[1].ID)
}

func sourceSite(t *testing.T, tg Target) {
	own1, own2 := NewSubmission(siteOf(tg)), NewSubmission(siteOf(tg))
	foreign := NewSubmission("site-elsewhere")
	batch := []ports.Submission{own1, foreign, own2}
	res := mustSubmit(t, tg, batch)
	if tg.Site == "" {
		// A trusted local caller may submit on behalf of any site.
		checkIDSet(t, "Accepted from a trusted caller", ids(batch), res.Accepted)
		if len(res.Rejected) > 0 {
			t.Errorf("Rejected = %v, want none from a trusted caller", res.Rejected)
		}
		mustBeStored(t, tg, foreign.ID)
		return
	}
	checkIDSet(t, "Accepted", []string{own1.ID, own2.ID}, res.Accepted)
	if len(res.Rejected) != 1 || res.Rejected[0].ID != foreign.ID {
		t.Fatalf("Rejected = %v, want exactly %s", res.Rejected, foreign.ID)
	}
	if r := res.Rejected[0].Reason; !strings.Contains(r, "site-elsewhere") {
		t.Errorf("rejection reason %q does not name the source site %q", r, "site-elsewhere")
	}
	mustNotBeStored(t, tg, foreign.ID)
	mustBeStored(t, tg, own1.ID)
	mustBeStored(t, tg, own2.ID)
}

func invalidRows(t *testing.T, tg Target) {
	site := siteOf(tg)
	valid := NewSubmission(site)
	atLimit := NewSubmission(site)
	atLimit.Subject = strings.Repeat("s", MaxSubjectBytes)

	badID := NewSubmission(site)
	badID.ID = "not-a-uuid"
	emptyList := NewSubmission(site)
	emptyList.List = ""
	longSubject := NewSubmission(site)
	longSubject.Subject = strings.Repeat("s", MaxSubjectBytes+1)
	badSubject := NewSubmission(site)
	badSubject.Subject = "caf\xe9 au lait" // Latin-1, not UTF-8
	badBody := NewSubmission(site)
	badBody.Body = "ok \xff\xfe then not"
	badList := NewSubmission(site)
	badList.List = "ops\xc3"

	cases := []struct {
		sub  ports.Submission
		hint string // a word the reason must hold
	}{
		{badID, "id"},
		{emptyList, "list"},
		{longSubject, "subject"},
		{badSubject, "UTF-8"},
		{badBody, "UTF-8"},
		{badList, "UTF-8"},
	}
	batch := []ports.Submission{valid}
	for _, c := range cases {
		batch = append(batch, c.sub)
	}
	batch = append(batch, atLimit)
	res := mustSubmit(t, tg, batch)
	checkIDSet(t, "Accepted", []string{valid.ID, atLimit.ID}, res.Accepted)
	reasons := make(map[string]string, len(res.Rejected))
	for _, r := range res.Rejected {
		reasons[r.ID] = r.Reason
	}
	if len(res.Rejected) != len(cases) {
		t.Errorf("Rejected %d submissions, want %d: %v", len(res.Rejected), len(cases), res.Rejected)
	}
	for _, c := range cases {
		reason, ok := reasons[c.sub.ID]
		switch {
		case !ok:
			t.Errorf("submission %q was not rejected", c.sub.ID)
		case !strings.Contains(reason, c.hint):
			t.Errorf("rejection of %q: reason %q does not mention %q", c.sub.ID, reason, c.hint)
		}
		if uuid.Validate(c.sub.ID) == nil {
			mustNotBeStored(t, tg, c.sub.ID)
		}
	}
	checkStored(t, valid, mustBeStored(t, tg, valid.ID))
	checkStored(t, atLimit, mustBeStored(t, tg, atLimit.ID))
}

func emptyBatch(t *testing.T, tg Target) {
	res := mustSubmit(t, tg, nil)
	if len(res.Accepted) > 0 || len(res.Rejected) > 0 {
		t.Errorf("Submit of an empty batch = %+v, want an empty result", res)
	}
}

func batchAtLimit(t *testing.T, tg Target) {
	batch := newBatch(siteOf(tg), MaxBatch)
	res := mustSubmit(t, tg, batch)
	if len(res.Accepted) != MaxBatch || len(res.Rejected) > 0 {
		t.Fatalf("Submit of %d: %d accepted, %d rejected; want all accepted", MaxBatch, len(res.Accepted), len(res.Rejected))
	}
	checkIDSet(t, "Accepted", ids(batch), res.Accepted)
	mustBeStored(t, tg, batch[0].ID)
	mustBeStored(t, tg, batch[MaxBatch-1].ID)
}

func batchOverLimit(t *testing.T, tg Target) {
	batch := newBatch(siteOf(tg), MaxBatch+1)
	res, err := tg.Central.Submit(t.Context(), ports.SubmitRequest{Notifications: batch})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Submit of %d notifications: err = %v, want one wrapping ports.ErrInvalid", len(batch), err)
	}
	if len(res.Accepted) > 0 || len(res.Rejected) > 0 {
		t.Errorf("Submit over the limit returned %d accepted and %d rejected, want an empty result",
			len(res.Accepted), len(res.Rejected))
	}
	for _, s := range batch {
		if _, ok := tg.Stored(t, s.ID); ok {
			t.Fatalf("row %s of a refused batch is stored", s.ID)
		}
	}
}

func statuses(t *testing.T, tg Target) {
	batch := newBatch(siteOf(tg), 2)
	mustSubmit(t, tg, batch)
	unknown := uuid.NewString()
	query := []string{batch[0].ID, unknown, batch[1].ID, "not-a-uuid", "bad \xff utf-8"}
	got, err := tg.Central.Status(t.Context(), ports.StatusRequest{IDs: query})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	want := map[string]ports.Status{
		batch[0].ID: ports.StatusPending, batch[1].ID: ports.StatusPending,
		unknown: ports.StatusUnknown, "not-a-uuid": ports.StatusUnknown, "bad \xff utf-8": ports.StatusUnknown,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Status(%q)\n  = %v\n  want %v", query, got, want)
	}

	none, err := tg.Central.Status(t.Context(), ports.StatusRequest{})
	if err != nil || len(none) != 0 {
		t.Errorf("Status of no ids = %v, %v; want an empty answer", none, err)
	}
}

// ownStatuses: a site learns the status of its own notifications only.
// Another site's id answers Unknown, exactly as an id nobody knows, even
// when the request names that other site. A trusted caller sees every row.
func ownStatuses(t *testing.T, tg Target) {
	own := NewSubmission(siteOf(tg))
	foreign := NewSubmission("site-elsewhere")
	unknown := uuid.NewString()
	mustSubmit(t, tg, []ports.Submission{own})
	store := tg.Central
	if tg.Site != "" {
		if tg.Trusted == nil {
			t.Fatal("Target.Trusted is nil: the suite needs it to store another site's notification")
		}
		store = tg.Trusted
	}
	if res, err := store.Submit(t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{foreign}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("Submit of another site's notification as a trusted caller: %+v, %v", res, err)
	}
	mustBeStored(t, tg, foreign.ID)

	query := []string{own.ID, foreign.ID, unknown}
	want := map[string]ports.Status{own.ID: ports.StatusPending, foreign.ID: ports.StatusUnknown, unknown: ports.StatusUnknown}
	if tg.Site == "" {
		want[foreign.ID] = ports.StatusPending
	}
	got, err := tg.Central.Status(t.Context(), ports.StatusRequest{IDs: query})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Status(%q) as %q\n  = %v\n  want %v", query, tg.Site, got, want)
	}
	if tg.Site == "" {
		return
	}
	// The request's Site is the caller's claim; only its identity counts.
	got, err = tg.Central.Status(t.Context(), ports.StatusRequest{Site: "site-elsewhere", IDs: query})
	if err != nil {
		t.Fatalf("Status naming another site: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Status(%q) as %q naming site-elsewhere in the request\n  = %v\n  want %v", query, tg.Site, got, want)
	}
}

// idOfAnotherSite: a site that submits an id already stored for another
// site is not told "accepted" — that would say a notification of its is
// stored when none is — but rejected with a reason that does not say whose
// the id is; the stored row stays the other site's, and the site's other
// submissions go in. A trusted caller's resend of any stored id is
// accepted, as ever.
func idOfAnotherSite(t *testing.T, tg Target) {
	foreign := NewSubmission("site-elsewhere")
	trusted := tg.Central
	if tg.Site != "" {
		if tg.Trusted == nil {
			t.Fatal("Target.Trusted is nil: the suite needs it to store another site's notification")
		}
		trusted = tg.Trusted
	}
	if res, err := trusted.Submit(t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{foreign}}); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("Submit of another site's notification as a trusted caller: %+v, %v", res, err)
	}
	clash := NewSubmission(siteOf(tg))
	clash.ID = foreign.ID
	clash.Subject = "the same id, another site"
	fresh := NewSubmission(siteOf(tg))
	res := mustSubmit(t, tg, []ports.Submission{clash, fresh})
	if tg.Site == "" {
		checkIDSet(t, "Accepted from a trusted caller", []string{clash.ID, fresh.ID}, res.Accepted)
		return
	}
	checkIDSet(t, "Accepted", []string{fresh.ID}, res.Accepted)
	if len(res.Rejected) != 1 || res.Rejected[0].ID != clash.ID {
		t.Fatalf("Rejected = %v, want exactly %s", res.Rejected, clash.ID)
	}
	if r := res.Rejected[0].Reason; !strings.Contains(r, "already in use") || strings.Contains(r, "site-elsewhere") {
		t.Errorf("rejection reason %q: want \"already in use\", without naming whose the id is", r)
	}
	if n := mustBeStored(t, tg, foreign.ID); n.SourceSite != "site-elsewhere" || n.Subject != foreign.Subject {
		t.Errorf("the stored row became %q's (%q)", n.SourceSite, n.Subject)
	}
	mustBeStored(t, tg, fresh.ID)
	got, err := tg.Central.Status(t.Context(), ports.StatusRequest{IDs: []string{clash.ID, fresh.ID}})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if want := map[string]ports.Status{clash.ID: ports.StatusUnknown, fresh.ID: ports.StatusPending}; !reflect.DeepEqual(got, want) {
		t.Errorf("Status = %v, want %v", got, want)
	}
	// Its own resend still is accepted.
	again := mustSubmit(t, tg, []ports.Submission{fresh})
	checkIDSet(t, "Accepted (a resend of its own)", []string{fresh.ID}, again.Accepted)
}

// listDecidesType: a submission's type is its list's. One that names
// another type is rejected with a reason and not stored; one without a type
// takes the list's; one to an unknown list is stored without a type (it
// parks at dispatch), whatever type it named.
func listDecidesType(t *testing.T, tg Target) {
	site := siteOf(tg)
	forged := NewSubmission(site) // to the email list ops
	forged.Type = "webhook"
	untyped := NewSubmission(site)
	untyped.List, untyped.Type = "hooks", ""
	unknown := NewSubmission(site)
	unknown.List, unknown.Type = UnknownList, "webhook"
	res := mustSubmit(t, tg, []ports.Submission{forged, untyped, unknown})
	checkIDSet(t, "Accepted", []string{untyped.ID, unknown.ID}, res.Accepted)
	if len(res.Rejected) != 1 || res.Rejected[0].ID != forged.ID {
		t.Fatalf("Rejected = %v, want exactly %s", res.Rejected, forged.ID)
	}
	if r := res.Rejected[0].Reason; !strings.Contains(r, "type") || !strings.Contains(r, `"webhook"`) {
		t.Errorf("rejection reason %q does not name the type %q", r, "webhook")
	}
	mustNotBeStored(t, tg, forged.ID)
	if n := mustBeStored(t, tg, untyped.ID); n.Type != "webhook" {
		t.Errorf("row to list hooks without a type: Type = %q, want the list's %q", n.Type, "webhook")
	}
	if n := mustBeStored(t, tg, unknown.ID); n.Type != "" {
		t.Errorf("row to an unknown list: Type = %q, want none", n.Type)
	}
}

// priorityRange: MinPriority and MaxPriority are accepted, anything beyond
// is rejected with a reason naming the priority.
func priorityRange(t *testing.T, tg Target) {
	site := siteOf(tg)
	var batch, bad []ports.Submission
	for _, p := range []int{ports.MinPriority, 0, ports.MaxPriority} {
		s := NewSubmission(site)
		s.Priority = p
		batch = append(batch, s)
	}
	for _, p := range []int{ports.MinPriority - 1, ports.MaxPriority + 1, 1<<31 - 1, -1 << 31} {
		s := NewSubmission(site)
		s.Priority = p
		bad = append(bad, s)
	}
	res := mustSubmit(t, tg, append(slices.Clone(batch), bad...))
	checkIDSet(t, "Accepted", ids(batch), res.Accepted)
	checkIDSet(t, "Rejected", ids(bad), rejectedIDs(res))
	for _, r := range res.Rejected {
		if !strings.Contains(r.Reason, "priority") {
			t.Errorf("rejection %q does not mention the priority", r.Reason)
		}
	}
	for _, s := range bad {
		mustNotBeStored(t, tg, s.ID)
	}
}

func rejectedIDs(r ports.SubmitResult) []string {
	out := make([]string, len(r.Rejected))
	for i, rej := range r.Rejected {
		out[i] = rej.ID
	}
	return out
}

// --- helpers -----------------------------------------------------------------

func newBatch(site string, n int) []ports.Submission {
	batch := make([]ports.Submission, n)
	for i := range batch {
		batch[i] = NewSubmission(site)
	}
	return batch
}

func mustSubmit(t *testing.T, tg Target, batch []ports.Submission) ports.SubmitResult {
	t.Helper()
	res, err := tg.Central.Submit(t.Context(), ports.SubmitRequest{Notifications: batch})
	if err != nil {
		t.Fatalf("Submit of %d notifications: %v", len(batch), err)
	}
	return res
}

func mustBeStored(t *testing.T, tg Target, id string) ports.Notification {
	t.Helper()
	n, ok := tg.Stored(t, id)
	if !ok {
		t.Fatalf("row %s is not stored", id)
	}
	return n
}

func mustNotBeStored(t *testing.T, tg Target, id string) {
	t.Helper()
	if _, ok := tg.Stored(t, id); ok {
		t.Errorf("row %s is stored, want it refused", id)
	}
}

// checkStored reports every field in which the stored row n differs from the
// submission s it was made from.
func checkStored(t *testing.T, s ports.Submission, n ports.Notification) {
	t.Helper()
	var d []string
	str := func(name, w, g string) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: want %q, got %q", name, w, g))
		}
	}
	tm := func(name string, w, g time.Time) {
		if w.IsZero() != g.IsZero() || !w.Equal(g) {
			d = append(d, fmt.Sprintf("%s: want %s, got %s", name, fmtTime(w), fmtTime(g)))
		}
	}
	str("ID", s.ID, n.ID)
	str("List", s.List, n.List)
	str("Subject", s.Subject, n.Subject)
	str("Body", s.Body, n.Body)
	str("Type", listType(s.List), n.Type)
	if !sameJSON(s.TypeData, n.TypeData) {
		d = append(d, fmt.Sprintf("TypeData: want %s, got %s", s.TypeData, n.TypeData))
	}
	if s.Priority != n.Priority {
		d = append(d, fmt.Sprintf("Priority: want %d, got %d", s.Priority, n.Priority))
	}
	str("SourceSite", s.SourceSite, n.SourceSite)
	str("SourceInstance", s.SourceInstance, n.SourceInstance)
	str("SourceScript", s.SourceScript, n.SourceScript)
	str("ExecutionID", s.ExecutionID, n.ExecutionID)
	str("ParentExecutionID", s.ParentExecutionID, n.ParentExecutionID)
	tm("SiteEnqueuedAt", s.SiteEnqueuedAt, n.SiteEnqueuedAt)
	tm("ExpiresAt", s.ExpiresAt, n.ExpiresAt)
	if len(d) > 0 {
		t.Errorf("row %s differs from its submission:\n  %s", s.ID, strings.Join(d, "\n  "))
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "zero"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// sameJSON compares two JSON documents as values, nil equal to empty.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == 0 && len(b) == 0
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(va, vb)
}

func ids(batch []ports.Submission) []string {
	out := make([]string, len(batch))
	for i, s := range batch {
		out[i] = s.ID
	}
	return out
}

// checkIDSet reports when got does not hold the ids of want exactly once
// each, in any order.
func checkIDSet(t *testing.T, what string, want, got []string) {
	t.Helper()
	w, g := slices.Clone(want), slices.Clone(got)
	slices.Sort(w)
	slices.Sort(g)
	if !slices.Equal(w, g) {
		t.Errorf("%s:\n  want (any order) %d ids %v\n  got  %d ids %v", what, len(w), w, len(g), g)
	}
}
