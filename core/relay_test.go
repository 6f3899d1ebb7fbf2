package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// newCentral returns a Service whose mirror is store's.
func newCentral(t *testing.T, store *memstore.Store, cfg Config) *Service {
	t.Helper()
	svc, err := New(cfg, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{}, Directory: okDirectory{},
		SiteCalls: store})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// opAt is a site's tracking row id at version v in status st.
func opAt(id string, v uint64, st ports.OpStatus) ports.Operation {
	created := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	op := ports.Operation{ID: id, Kind: ports.OpCall, Target: "erp", Method: "post", Status: st,
		RetryCount: int(v), LastError: fmt.Sprintf("try %d", v), CreatedAt: created,
		UpdatedAt: created.Add(time.Duration(v) * time.Minute), Version: v}
	if st.Terminal() {
		op.TerminalAt = op.UpdatedAt
	}
	return op
}

// mirrored returns the mirror's row, failing when it is absent.
func mirrored(t *testing.T, store *memstore.Store, site, id string) ports.SiteCall {
	t.Helper()
	c, err := store.GetSiteCall(context.Background(), site, id)
	if err != nil {
		t.Fatalf("mirror row %s of %s: %v", id, site, err)
	}
	return c
}

// report sends ops as site's telemetry.
func report(t *testing.T, svc *Service, site string, ops ...ports.Operation) {
	t.Helper()
	if err := svc.ReportOperations(context.Background(), ports.OpReport{Site: site, Ops: ops}); err != nil {
		t.Fatalf("ReportOperations of %s: %v", site, err)
	}
}

// leaderSync is a Sync of site's node that leads, waiting up to wait.
func leaderSync(t *testing.T, svc *Service, site, node string, wait time.Duration, answers ...ports.CommandAnswer) ports.SyncAnswer {
	t.Helper()
	ans, err := svc.Sync(context.Background(), ports.SyncRequest{Site: site, Leads: true, Wait: wait, Answers: answers,
		Health: ports.SiteHealth{Node: node, Replica: ports.ReplicaState{Node: node, Role: ports.RoleLeader, Leader: node}}})
	if err != nil {
		t.Fatalf("Sync of %s/%s: %v", site, node, err)
	}
	return ans
}

// TestReportOperationsOutOfOrderAndRepeated: telemetry that arrives late,
// twice or out of order leaves the newest version, and one site's report
// never touches another site's row of the same id.
func TestReportOperationsOutOfOrderAndRepeated(t *testing.T) {
	store := memstore.New()
	svc := newCentral(t, store, Config{})
	report(t, svc, "north", opAt("op-1", 3, ports.OpParked))
	report(t, svc, "north", opAt("op-1", 1, ports.OpPending), opAt("op-1", 2, ports.OpRetrying))
	report(t, svc, "north", opAt("op-1", 3, ports.OpParked))
	if c := mirrored(t, store, "north", "op-1"); c.Version != 3 || c.Status != ports.OpParked {
		t.Fatalf("after late and repeated reports the mirror holds version %d %s; want 3 Parked", c.Version, c.Status)
	}
	report(t, svc, "north", opAt("op-1", 5, ports.OpDelivered), opAt("op-1", 4, ports.OpRetrying))
	if c := mirrored(t, store, "north", "op-1"); c.Version != 5 || c.Status != ports.OpDelivered {
		t.Fatalf("a report holding versions 5 and 4 left version %d %s; want 5 Delivered", c.Version, c.Status)
	}
	report(t, svc, "south", opAt("op-1", 1, ports.OpPending))
	if c := mirrored(t, store, "north", "op-1"); c.Version != 5 {
		t.Fatalf("south's report of the same id changed north's row to version %d", c.Version)
	}
	if c := mirrored(t, store, "south", "op-1"); c.Site != "south" || c.Version != 1 {
		t.Fatalf("south's row: %+v", c)
	}

	ctx := context.Background()
	big := make([]ports.Operation, ports.MaxSiteCallReport+1)
	for i := range big {
		big[i] = opAt(fmt.Sprintf("big-%d", i), 1, ports.OpPending)
	}
	for name, req := range map[string]ports.OpReport{
		"no site":      {Ops: []ports.Operation{opAt("op-2", 1, ports.OpPending)}},
		"over limit":   {Site: "north", Ops: big},
		"invalid row":  {Site: "north", Ops: []ports.Operation{opAt("op-2", 1, ports.OpPending), {ID: "op-3"}}},
		"long cursor":  {Site: "north", Feed: &ports.FeedPage{Next: strings.Repeat("x", ports.MaxSiteCursorBytes+1)}},
		"long from":    {Site: "north", Feed: &ports.FeedPage{From: strings.Repeat("x", ports.MaxSiteCursorBytes+1)}},
		"non-UTF-8 ep": {Site: "north", Feed: &ports.FeedPage{Epoch: "\xff"}},
	} {
		if err := svc.ReportOperations(ctx, req); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: ReportOperations = %v; want ErrInvalid", name, err)
		}
	}
	if _, err := store.GetSiteCall(ctx, "north", "op-2"); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("a report refused whole stored its valid row: %v", err)
	}
}

// TestReconciliationPagesAndCursor: the first leader Sync asks for the
// feed from the stored cursor; each page that continues the cursor moves
// it and, until the last, the next Sync asks again at once; a repeated
// page stores its rows and moves nothing; after the last page the leader
// is asked again after ReconcileInterval, or at once when the leader
// changes; a new central node asks at once.
func TestReconciliationPagesAndCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc := newCentral(t, store, Config{ReconcileInterval: 5 * time.Minute})
		cursor := func() ports.SiteCursor {
			t.Helper()
			c, err := store.SiteCursor(ctx, "north")
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		page := func(p ports.FeedPage, ops ...ports.Operation) {
			t.Helper()
			if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north", Ops: ops, Feed: &p}); err != nil {
				t.Fatal(err)
			}
		}

		ans := leaderSync(t, svc, "north", "n1", 10*time.Second)
		if ans.Feed == nil || *ans.Feed != (ports.SiteCursor{}) {
			t.Fatalf("the first leader Sync asked for %+v; want the feed from the start", ans.Feed)
		}
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed != nil {
			t.Fatalf("asked for the feed again before the page came: %+v", ans.Feed)
		}
		page(ports.FeedPage{Epoch: "E1", From: "", Next: "p1"}, opAt("a", 2, ports.OpParked))
		if got := cursor(); got != (ports.SiteCursor{Epoch: "E1", After: "p1"}) {
			t.Fatalf("cursor after the first page: %+v", got)
		}
		start := time.Now()
		ans = leaderSync(t, svc, "north", "n1", 10*time.Second)
		if ans.Feed == nil || *ans.Feed != (ports.SiteCursor{Epoch: "E1", After: "p1"}) || time.Since(start) != 0 {
			t.Fatalf("after a page that was not the last, Sync asked %+v after %s; want E1/p1 at once", ans.Feed, time.Since(start))
		}
		// The first page again (a report repeated late): its rows are
		// stored, the cursor stays.
		page(ports.FeedPage{Epoch: "E1", From: "", Next: "p1"}, opAt("b", 1, ports.OpPending))
		mirrored(t, store, "north", "b")
		page(ports.FeedPage{Epoch: "E1", From: "p1", Next: "p2", Last: true}, opAt("c", 1, ports.OpPending))
		page(ports.FeedPage{Epoch: "E1", From: "p1", Next: "p9", Last: true})
		if got := cursor(); got != (ports.SiteCursor{Epoch: "E1", After: "p2"}) {
			t.Fatalf("cursor after the last page and a repeat: %+v; want E1/p2", got)
		}

		// Nothing to ask: the Sync waits its whole wait.
		start = time.Now()
		if ans := leaderSync(t, svc, "north", "n1", 15*time.Second); ans.Feed != nil || len(ans.Commands) > 0 {
			t.Fatalf("after the last page Sync asked %+v", ans)
		}
		if waited := time.Since(start); waited != 15*time.Second {
			t.Fatalf("an idle Sync answered after %s; want its wait, 15s", waited)
		}
		time.Sleep(5 * time.Minute)
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed == nil || *ans.Feed != cursor() {
			t.Fatalf("ReconcileInterval after the last page Sync asked %+v; want the stored cursor", ans.Feed)
		}
		page(ports.FeedPage{Epoch: "E1", From: "p2", Next: "p2", Last: true})

		// The leader changed: asked at once.
		if ans := leaderSync(t, svc, "north", "n2", 0); ans.Feed == nil {
			t.Fatal("a new leader was not asked for the feed")
		}
		page(ports.FeedPage{Epoch: "E1", From: "p2", Next: "p3", Last: true})
		if ans := leaderSync(t, svc, "north", "n2", 0); ans.Feed != nil {
			t.Fatalf("asked again right after the last page: %+v", ans.Feed)
		}
		// A central node that just started asks at once, from the shared cursor.
		other := newCentral(t, store, Config{})
		if ans := leaderSync(t, other, "north", "n2", 0); ans.Feed == nil || *ans.Feed != (ports.SiteCursor{Epoch: "E1", After: "p3"}) {
			t.Fatalf("a new central node asked %+v; want E1/p3", ans.Feed)
		}

		// A page that never comes is asked for again.
		if ans := leaderSync(t, svc, "north", "n2", 0); ans.Feed != nil {
			t.Fatal("asked too early")
		}
		time.Sleep(5 * time.Minute)
		if ans := leaderSync(t, svc, "north", "n2", 0); ans.Feed == nil {
			t.Fatal("not asked after ReconcileInterval")
		}
		time.Sleep(feedAnswerTimeout)
		if ans := leaderSync(t, svc, "north", "n2", 0); ans.Feed == nil {
			t.Fatal("a page that never came was not asked for again")
		}
	})
}

// TestReconciliationEpochChange: a page of another epoch moves the cursor
// only when it reads that feed from its start; the site's rows are stored
// either way.
func TestReconciliationEpochChange(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	svc := newCentral(t, store, Config{})
	if err := store.SetSiteCursor(ctx, "north", ports.SiteCursor{Epoch: "E1", After: "p7"}); err != nil {
		t.Fatal(err)
	}
	send := func(p ports.FeedPage, ops ...ports.Operation) ports.SiteCursor {
		t.Helper()
		if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north", Ops: ops, Feed: &p}); err != nil {
			t.Fatal(err)
		}
		c, err := store.SiteCursor(ctx, "north")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := send(ports.FeedPage{Epoch: "E2", From: "q3", Next: "q4"}, opAt("x", 1, ports.OpPending)); c != (ports.SiteCursor{Epoch: "E1", After: "p7"}) {
		t.Fatalf("a page of a new epoch not from its start moved the cursor to %+v", c)
	}
	mirrored(t, store, "north", "x")
	if c := send(ports.FeedPage{Epoch: "E2", From: "", Next: "q1"}); c != (ports.SiteCursor{Epoch: "E2", After: "q1"}) {
		t.Fatalf("a new epoch from its start: cursor %+v; want E2/q1", c)
	}
	if c := send(ports.FeedPage{Epoch: "E1", From: "p7", Next: "p8"}); c != (ports.SiteCursor{Epoch: "E2", After: "q1"}) {
		t.Fatalf("a late page of the old epoch moved the cursor to %+v", c)
	}
	// A feed without an epoch (a store kept before the feed had one) is
	// read from the start each time: each such page continues.
	if c := send(ports.FeedPage{Epoch: "", From: "", Next: "r1"}); c != (ports.SiteCursor{After: "r1"}) {
		t.Fatalf("a page without an epoch from the start: cursor %+v; want /r1", c)
	}
	if c := send(ports.FeedPage{Epoch: "", From: "", Next: "r2"}); c != (ports.SiteCursor{After: "r2"}) {
		t.Fatalf("a page without an epoch read again from the start: cursor %+v; want /r2", c)
	}
	if c := send(ports.FeedPage{Epoch: "", From: "r1", Next: "r3"}); c != (ports.SiteCursor{After: "r2"}) {
		t.Fatalf("a page after a position the cursor has left moved it to %+v", c)
	}
}

// TestSiteCommandsOnlyForParkedRows: Retry and Discard request a command
// for each Parked row, refuse the others with a reason, leave every
// status alone, and refuse a second command while one is pending.
func TestSiteCommandsOnlyForParkedRows(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	svc := newCentral(t, store, Config{})
	report(t, svc, "north", opAt("p1", 4, ports.OpParked), opAt("p2", 4, ports.OpParked),
		opAt("d1", 2, ports.OpDelivered), opAt("r1", 2, ports.OpRetrying))
	report(t, svc, "south", opAt("s1", 4, ports.OpParked))

	key := func(site, id string) ports.SiteCallKey { return ports.SiteCallKey{Site: site, ID: id} }
	res, err := svc.RetrySiteCalls(ctx, ports.SiteCallAction{Actor: "alice",
		Keys: []ports.SiteCallKey{key("north", "p1"), key("north", "d1"), key("north", "r1"), key("north", "zz"), key("north", "p1")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Requested) != 1 || res.Requested[0] != key("north", "p1") {
		t.Fatalf("requested %v; want north/p1 alone", res.Requested)
	}
	reasons := map[string]string{}
	for _, r := range res.Refused {
		reasons[r.ID] = r.Reason
	}
	for id, want := range map[string]string{"d1": "is Delivered; only Parked", "r1": "is Retrying; only Parked", "zz": "not known"} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("refusal of %s: %q; want it to say %q", id, reasons[id], want)
		}
	}
	if len(res.Refused) != 3 {
		t.Errorf("refused %d rows; want 3: %+v", len(res.Refused), res.Refused)
	}
	c := mirrored(t, store, "north", "p1")
	if c.Status != ports.OpParked || c.Requested != ports.SiteRetry || c.RequestedBy != "alice" {
		t.Fatalf("the retried row: %s, requested %q by %q; want Parked, Retry by alice", c.Status, c.Requested, c.RequestedBy)
	}
	d, err := svc.SiteCall(ctx, "north", "p1")
	if err != nil || len(d.Commands) != 1 || d.Commands[0].Actor != "alice" || d.Commands[0].State != ports.CommandRequested {
		t.Fatalf("the row's commands: %+v, %v", d.Commands, err)
	}
	res, err = svc.DiscardSiteCalls(ctx, ports.SiteCallAction{Actor: "bob", Keys: []ports.SiteCallKey{key("north", "p1")}})
	if err != nil || len(res.Requested) != 0 || len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, "requested by alice") {
		t.Fatalf("a second command while one is pending: %+v, %v; want refused", res, err)
	}

	// By filter: the Parked rows of north without a command.
	res, err = svc.DiscardSiteCalls(ctx, ports.SiteCallAction{Actor: "bob", Filter: ports.SiteCallFilter{Site: "north"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Requested) != 1 || res.Requested[0] != key("north", "p2") {
		t.Fatalf("discard by filter requested %v; want north/p2", res.Requested)
	}
	res, err = svc.RetrySiteCalls(ctx, ports.SiteCallAction{Actor: "bob", Filter: ports.SiteCallFilter{Statuses: []ports.OpStatus{ports.OpDelivered}}})
	if err != nil || len(res.Requested)+len(res.Refused) != 0 {
		t.Fatalf("a filter on Delivered rows selected %+v, %v", res, err)
	}
	res, err = svc.RetrySiteCalls(ctx, ports.SiteCallAction{Actor: "bob", All: true})
	if err != nil || len(res.Requested) != 1 || res.Requested[0] != key("south", "s1") {
		t.Fatalf("retry all: %+v, %v; want south/s1", res, err)
	}
	for name, a := range map[string]ports.SiteCallAction{
		"no actor":     {Keys: []ports.SiteCallKey{key("north", "p1")}},
		"no selection": {Actor: "bob"},
		"bad status":   {Actor: "bob", Filter: ports.SiteCallFilter{Statuses: []ports.OpStatus{"Lost"}}},
	} {
		if _, err := svc.RetrySiteCalls(ctx, a); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
}

// TestSyncRelaysCommandsAndTakesAnswers: the leader's Sync gets the
// pending commands (a follower's none); its answers finish them, a
// refusal clearing the row's mark, a repeated answer changing nothing;
// the mark of an applied command stays until the row's report.
func TestSyncRelaysCommandsAndTakesAnswers(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	svc := newCentral(t, store, Config{})
	report(t, svc, "north", opAt("p1", 4, ports.OpParked), opAt("p2", 4, ports.OpParked))
	report(t, svc, "south", opAt("s1", 4, ports.OpParked))
	if _, err := svc.RetrySiteCalls(ctx, ports.SiteCallAction{Actor: "alice", All: true}); err != nil {
		t.Fatal(err)
	}
	fol, err := svc.Sync(ctx, ports.SyncRequest{Site: "north", Health: ports.SiteHealth{Node: "n2"}, Wait: time.Second})
	if err != nil || len(fol.Commands) != 0 || fol.Feed != nil {
		t.Fatalf("a follower's Sync: %+v, %v; want nothing asked", fol, err)
	}
	ans := leaderSync(t, svc, "north", "n1", 0)
	if len(ans.Commands) != 2 {
		t.Fatalf("the leader got %d commands; want north's 2: %+v", len(ans.Commands), ans.Commands)
	}
	byOp := map[string]ports.SiteCommand{}
	for _, c := range ans.Commands {
		if c.Site != "north" || c.Action != ports.SiteRetry || c.Actor != "alice" {
			t.Fatalf("command %+v", c)
		}
		byOp[c.OperationID] = c
	}
	south := leaderSync(t, svc, "south", "s-n1", 0)
	answers := []ports.CommandAnswer{
		{ID: byOp["p1"].ID, State: ports.CommandApplied},
		{ID: byOp["p2"].ID, State: ports.CommandRefused, Result: "operation p2 is Delivered"},
		{ID: south.Commands[0].ID, State: ports.CommandRefused, Result: "north answering south's"},
		{ID: "never-asked", State: ports.CommandApplied},
	}
	if ans := leaderSync(t, svc, "north", "n1", 0, answers...); len(ans.Commands) != 0 {
		t.Fatalf("answered commands came again: %+v", ans.Commands)
	}
	if ans := leaderSync(t, svc, "north", "n1", 0, answers...); len(ans.Commands) != 0 {
		t.Fatalf("after repeated answers: %+v", ans.Commands)
	}
	if d, _ := svc.SiteCall(ctx, "north", "p1"); d.Requested != ports.SiteRetry || d.Commands[0].State != ports.CommandApplied {
		t.Fatalf("applied: row requested %q, command %s; want still Retry (until the report), Applied", d.Requested, d.Commands[0].State)
	}
	if d, _ := svc.SiteCall(ctx, "north", "p2"); d.Requested != "" || d.Commands[0].State != ports.CommandRefused ||
		d.Commands[0].Result != "operation p2 is Delivered" {
		t.Fatalf("refused: row requested %q, command %+v", d.Requested, d.Commands[0])
	}
	if d, _ := svc.SiteCall(ctx, "south", "s1"); d.Commands[0].State != ports.CommandRequested {
		t.Fatalf("north answered south's command: %+v", d.Commands[0])
	}
	report(t, svc, "north", opAt("p1", 5, ports.OpRetrying))
	if c := mirrored(t, store, "north", "p1"); c.Requested != "" || c.Status != ports.OpRetrying {
		t.Fatalf("after the site's report: %s, requested %q", c.Status, c.Requested)
	}

	for name, req := range map[string]ports.SyncRequest{
		"no site":        {Health: ports.SiteHealth{Node: "n1"}},
		"another site":   {Site: "north", Health: ports.SiteHealth{Site: "south", Node: "n1"}},
		"no node":        {Site: "north"},
		"negative wait":  {Site: "north", Health: ports.SiteHealth{Node: "n1"}, Wait: -time.Second},
		"bad answer":     {Site: "north", Health: ports.SiteHealth{Node: "n1"}, Leads: true, Answers: []ports.CommandAnswer{{ID: "c", State: ports.CommandRequested}}},
		"too many":       {Site: "north", Health: ports.SiteHealth{Node: "n1"}, Leads: true, Answers: make([]ports.CommandAnswer, maxSyncAnswers+1)},
		"negative count": {Site: "north", Health: ports.SiteHealth{Node: "n1", Backlog: -1}},
	} {
		if _, err := svc.Sync(ctx, req); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: Sync = %v; want ErrInvalid", name, err)
		}
	}
	health, err := store.SiteHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range health {
		if h.Site != "north" && h.Site != "south" {
			t.Errorf("a refused Sync recorded health of %q", h.Site)
		}
	}
}

// TestSyncLongPoll: a leader's Sync with nothing to ask waits; a command
// requested on the same node answers it at once, one requested on another
// node within a second; the context ends it early.
func TestSyncLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc := newCentral(t, store, Config{})
		other := newCentral(t, store, Config{})
		report(t, svc, "north", opAt("p1", 4, ports.OpParked), opAt("p2", 4, ports.OpParked))
		leaderSync(t, svc, "north", "n1", 0) // takes the first feed ask
		if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north", Feed: &ports.FeedPage{Epoch: "E", Next: "1", Last: true}}); err != nil {
			t.Fatal(err)
		}

		poll := func(svc *Service, pctx context.Context) (<-chan ports.SyncAnswer, time.Time) {
			out := make(chan ports.SyncAnswer, 1)
			start := time.Now()
			go func() {
				ans, err := svc.Sync(pctx, ports.SyncRequest{Site: "north", Leads: true, Wait: ports.SiteReportInterval,
					Health: ports.SiteHealth{Node: "n1"}})
				if err != nil {
					t.Error(err)
				}
				out <- ans
			}()
			synctest.Wait()
			return out, start
		}
		done, start := poll(svc, ctx)
		select {
		case ans := <-done:
			t.Fatalf("Sync answered %+v with nothing to ask", ans)
		default:
		}
		if _, err := svc.RetrySiteCalls(ctx, ports.SiteCallAction{Actor: "alice", Keys: []ports.SiteCallKey{{Site: "north", ID: "p1"}}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case ans := <-done:
			if len(ans.Commands) != 1 || time.Since(start) != 0 {
				t.Fatalf("woken Sync answered %+v after %s; want the command at once", ans, time.Since(start))
			}
		default:
			t.Fatal("a command requested on this node did not wake the Sync")
		}

		leaderSync(t, svc, "north", "n1", 0, ports.CommandAnswer{ID: mustPending(t, store), State: ports.CommandApplied})
		done, start = poll(svc, ctx)
		if _, err := other.DiscardSiteCalls(ctx, ports.SiteCallAction{Actor: "bob", Keys: []ports.SiteCallKey{{Site: "north", ID: "p2"}}}); err != nil {
			t.Fatal(err)
		}
		ans := <-done
		if len(ans.Commands) != 1 || ans.Commands[0].Action != ports.SiteDiscard || time.Since(start) > syncPollInterval {
			t.Fatalf("a command requested on another node reached the Sync as %+v after %s; want it within %s",
				ans, time.Since(start), syncPollInterval)
		}

		leaderSync(t, svc, "north", "n1", 0, ports.CommandAnswer{ID: ans.Commands[0].ID, State: ports.CommandApplied})
		cctx, cancel := context.WithCancel(ctx)
		done, start = poll(svc, cctx)
		time.Sleep(3 * time.Second)
		cancel()
		if ans := <-done; len(ans.Commands) != 0 || time.Since(start) != 3*time.Second {
			t.Fatalf("a cancelled Sync answered %+v after %s", ans, time.Since(start))
		}
		// A wait over MaxSyncWait is cut to it.
		start = time.Now()
		if _, err := svc.Sync(ctx, ports.SyncRequest{Site: "north", Leads: true, Wait: time.Hour, Health: ports.SiteHealth{Node: "n1"}}); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != ports.MaxSyncWait {
			t.Fatalf("a Sync asking to wait an hour waited %s; want %s", waited, ports.MaxSyncWait)
		}
	})
}

// mustPending returns the id of the one pending command of north.
func mustPending(t *testing.T, store *memstore.Store) string {
	t.Helper()
	cmds, err := store.PendingSiteCommands(context.Background(), "north", 10)
	if err != nil || len(cmds) != 1 {
		t.Fatalf("pending commands: %+v, %v", cmds, err)
	}
	return cmds[0].ID
}

// TestSiteStatesOverTime: a site is connected while a node reported within
// SiteStaleAfter, stale until SiteDisconnectedAfter, disconnected after,
// and connected again at its next report; the view names the leader and
// carries the mirror's counts.
func TestSiteStatesOverTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc := newCentral(t, store, Config{})
		report(t, svc, "north", opAt("p1", 4, ports.OpParked), opAt("r1", 1, ports.OpRetrying))
		sync := func(node string, role ports.Role) {
			t.Helper()
			if _, err := svc.Sync(ctx, ports.SyncRequest{Site: "north", Health: ports.SiteHealth{Node: node, Backlog: 7,
				Replica: ports.ReplicaState{Node: node, Role: role}}}); err != nil {
				t.Fatal(err)
			}
		}
		view := func() ports.SiteView {
			t.Helper()
			sites, err := svc.Sites(ctx)
			if err != nil || len(sites) != 1 {
				t.Fatalf("Sites: %+v, %v", sites, err)
			}
			return sites[0]
		}
		sync("n1", ports.RoleLeader)
		time.Sleep(5 * time.Second)
		sync("n2", ports.RoleFollower)
		last := time.Now()
		v := view()
		if v.State != ports.SiteConnected || v.Leader != "n1" || len(v.Nodes) != 2 || !v.LastContact.Equal(last) ||
			v.Calls.Parked != 1 || v.Calls.Retrying != 1 || v.Nodes[0].Backlog != 7 {
			t.Fatalf("view: %+v", v)
		}
		for _, step := range []struct {
			after time.Duration
			want  ports.SiteState
		}{
			{ports.SiteStaleAfter, ports.SiteConnected},
			{ports.SiteStaleAfter + time.Second, ports.SiteStale},
			{ports.SiteDisconnectedAfter, ports.SiteStale},
			{ports.SiteDisconnectedAfter + time.Second, ports.SiteDisconnected},
		} {
			time.Sleep(time.Until(last.Add(step.after)))
			if v := view(); v.State != step.want || !v.LastContact.Equal(last) {
				t.Fatalf("%s after the last report: %s (last contact %s); want %s", step.after, v.State, v.LastContact, step.want)
			}
		}
		sync("n2", ports.RoleLeader)
		if v := view(); v.State != ports.SiteConnected || v.Leader != "n2" {
			t.Fatalf("after a new report: %s led by %q; want connected, n2", v.State, v.Leader)
		}
	})
}

// TestPurgeSiteCalls: the purge removes the mirror's terminal rows that
// ended TerminalRetention ago and keeps the younger and the buffered
// ones; Run purges the mirror too.
func TestPurgeSiteCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc := newCentral(t, store, Config{TerminalRetention: 36 * time.Hour, PurgeInterval: 24 * time.Hour, DispatchInterval: time.Hour})
		at := func(op ports.Operation) ports.Operation {
			op.CreatedAt, op.UpdatedAt = time.Now(), time.Now()
			if op.Status.Terminal() {
				op.TerminalAt = op.UpdatedAt
			}
			return op
		}
		report(t, svc, "north", at(opAt("old-d", 2, ports.OpDelivered)), at(opAt("old-f", 2, ports.OpFailed)),
			at(opAt("parked", 2, ports.OpParked)))
		time.Sleep(48 * time.Hour)
		report(t, svc, "north", at(opAt("young", 2, ports.OpDiscarded)))
		n, err := svc.PurgeSiteCalls(ctx)
		if err != nil || n != 2 {
			t.Fatalf("PurgeSiteCalls = %d, %v; want the 2 old terminal rows", n, err)
		}
		for _, id := range []string{"parked", "young"} {
			mirrored(t, store, "north", id)
		}
		runService(t, svc)
		time.Sleep(48 * time.Hour)
		synctest.Wait()
		if _, err := store.GetSiteCall(ctx, "north", "young"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("Run's purge kept the row discarded 48 h ago (retention 36 h): %v", err)
		}
		mirrored(t, store, "north", "parked")
	})
}

// TestWithoutMirror: a Service built without a SiteCallStore answers the
// site link's newer calls Unavailable, and purges nothing.
func TestWithoutMirror(t *testing.T) {
	store := memstore.New()
	svc, err := New(Config{}, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{}, Directory: okDirectory{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north"}); !errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("ReportOperations = %v", err)
	}
	if _, err := svc.Sync(ctx, ports.SyncRequest{Site: "north"}); !errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("Sync = %v", err)
	}
	if _, err := svc.Sites(ctx); !errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("Sites = %v", err)
	}
	if n, err := svc.PurgeSiteCalls(ctx); n != 0 || err != nil {
		t.Errorf("PurgeSiteCalls = %d, %v", n, err)
	}
}

// TestReconciliationWhenASiteComesBack: a site whose leader's Syncs stop
// for longer than the stale time (an outage, central running all along) is
// asked for its feed at its first Sync back; Syncs at their usual pace, or
// a shorter gap, ask nothing before ReconcileInterval.
func TestReconciliationWhenASiteComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		svc := newCentral(t, store, Config{ReconcileInterval: time.Hour})
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed == nil {
			t.Fatal("the first leader Sync asked for no feed")
		}
		if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north", Ops: []ports.Operation{opAt("a", 1, ports.OpPending)},
			Feed: &ports.FeedPage{Epoch: "E1", Next: "p1", Last: true}}); err != nil {
			t.Fatal(err)
		}
		for range 6 {
			time.Sleep(ports.SiteReportInterval)
			if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed != nil {
				t.Fatalf("a Sync at the usual pace asked for the feed: %+v", ans.Feed)
			}
		}
		time.Sleep(ports.SiteStaleAfter - time.Second)
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed != nil {
			t.Fatalf("a gap shorter than the stale time asked for the feed: %+v", ans.Feed)
		}
		time.Sleep(ports.SiteStaleAfter + time.Second)
		ans := leaderSync(t, svc, "north", "n1", 0)
		if ans.Feed == nil || *ans.Feed != (ports.SiteCursor{Epoch: "E1", After: "p1"}) {
			t.Fatalf("the first Sync after an outage asked %+v; want the feed after the stored cursor", ans.Feed)
		}
	})
}
