package centraltest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// SitesTarget is what an implementation hands [ExerciseSites], the part of
// the contract about a site's cached operations: ReportOperations and Sync.
type SitesTarget struct {
	// Central is the implementation under test, called as Site, over an
	// empty mirror.
	Central ports.Central
	// Site is the identity the caller holds (required): whatever site a
	// request names, central takes this one.
	Site string
	// Mirror is central's mirror, read and seeded directly (not through
	// Central).
	Mirror ports.SiteCallStore
}

// ExerciseSites runs the contract of ReportOperations and Sync. open is
// called once per subtest and must return a central whose mirror is empty
// and that has not been called yet.
func ExerciseSites(t *testing.T, open func(t *testing.T) SitesTarget) {
	t.Helper()
	t.Run("ReportKeepsTheNewestVersion", func(t *testing.T) { reportNewest(t, open(t)) })
	t.Run("ReportOverLimit", func(t *testing.T) { reportOverLimit(t, open(t)) })
	t.Run("SyncRecordsHealth", func(t *testing.T) { syncRecordsHealth(t, open(t)) })
	t.Run("SyncRelaysCommands", func(t *testing.T) { syncRelaysCommands(t, open(t)) })
	t.Run("FeedPageMovesTheCursor", func(t *testing.T) { feedPageMovesCursor(t, open(t)) })
	t.Run("SyncWaits", func(t *testing.T) { syncWaits(t, open(t)) })
}

// NewOp returns a valid tracking row id at version v in status st, made
// at BaseTime.
func NewOp(id string, v uint64, st ports.OpStatus) ports.Operation {
	op := ports.Operation{ID: id, Kind: ports.OpCall, Target: "erp", Method: "post", Status: st,
		RetryCount: int(v), LastError: fmt.Sprintf("try %d", v), SourceScript: "lines/l1.script",
		CreatedAt: BaseTime, UpdatedAt: BaseTime.Add(time.Duration(v) * time.Second), Version: v}
	if st.Terminal() {
		op.TerminalAt = op.UpdatedAt
	}
	return op
}

func mirrorRow(t *testing.T, tg SitesTarget, id string) ports.SiteCall {
	t.Helper()
	c, err := tg.Mirror.GetSiteCall(t.Context(), tg.Site, id)
	if err != nil {
		t.Fatalf("mirror row %s of %s: %v", id, tg.Site, err)
	}
	return c
}

func mustReport(t *testing.T, tg SitesTarget, req ports.OpReport) {
	t.Helper()
	if err := tg.Central.ReportOperations(t.Context(), req); err != nil {
		t.Fatalf("ReportOperations: %v", err)
	}
}

func leader(tg SitesTarget, wait time.Duration, answers ...ports.CommandAnswer) ports.SyncRequest {
	return ports.SyncRequest{Site: tg.Site, Leads: true, Wait: wait, Answers: answers,
		Health: ports.SiteHealth{Site: tg.Site, Node: "node-1", Replica: ports.ReplicaState{Node: "node-1", Role: ports.RoleLeader, Leader: "node-1"}}}
}

func mustSync(t *testing.T, tg SitesTarget, req ports.SyncRequest) ports.SyncAnswer {
	t.Helper()
	ans, err := tg.Central.Sync(t.Context(), req)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return ans
}

func reportNewest(t *testing.T, tg SitesTarget) {
	mustReport(t, tg, ports.OpReport{Site: "intruder", Ops: []ports.Operation{NewOp("op-a", 2, ports.OpRetrying)}})
	mustReport(t, tg, ports.OpReport{Site: tg.Site, Ops: []ports.Operation{NewOp("op-a", 1, ports.OpPending), NewOp("op-a", 3, ports.OpParked)}})
	mustReport(t, tg, ports.OpReport{Site: tg.Site, Ops: []ports.Operation{NewOp("op-a", 2, ports.OpRetrying)}})
	c := mirrorRow(t, tg, "op-a")
	want := NewOp("op-a", 3, ports.OpParked)
	if c.Site != tg.Site || c.Version != 3 || c.Status != ports.OpParked || c.LastError != want.LastError ||
		!c.UpdatedAt.Equal(want.UpdatedAt) || c.SourceScript != want.SourceScript || c.ReportedAt.IsZero() {
		t.Errorf("mirror row after reports of versions 2, 1, 3, 2: %+v; want version 3 Parked", c)
	}
	if _, err := tg.Mirror.GetSiteCall(t.Context(), "intruder", "op-a"); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("a report naming another site stored a row under it: %v", err)
	}
}

func reportOverLimit(t *testing.T, tg SitesTarget) {
	ops := make([]ports.Operation, ports.MaxSiteCallReport+1)
	for i := range ops {
		ops[i] = NewOp(fmt.Sprintf("op-%04d", i), 1, ports.OpPending)
	}
	if err := tg.Central.ReportOperations(t.Context(), ports.OpReport{Site: tg.Site, Ops: ops}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("a report of %d rows: %v; want ErrInvalid", len(ops), err)
	}
	bad := NewOp("op-bad", 0, ports.OpPending)
	if err := tg.Central.ReportOperations(t.Context(), ports.OpReport{Site: tg.Site, Ops: []ports.Operation{NewOp("op-ok", 1, ports.OpPending), bad}}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("a report with a row of version 0: %v; want ErrInvalid", err)
	}
	n, err := tg.Mirror.CountSiteCalls(t.Context(), ports.SiteCallFilter{})
	if err != nil || n != 0 {
		t.Errorf("refused reports stored %d rows (%v); want none", n, err)
	}
}

func syncRecordsHealth(t *testing.T, tg SitesTarget) {
	h := ports.SiteHealth{Site: tg.Site, Node: "node-2", Backlog: 3, OldestEnqueuedAt: BaseTime,
		Replica:    ports.ReplicaState{Node: "node-2", Role: ports.RoleFollower, Term: 4, Leader: "node-1"},
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 2, Parked: 1, OldestBufferedAt: BaseTime}}}
	ans := mustSync(t, tg, ports.SyncRequest{Site: "intruder", Health: h})
	if len(ans.Commands) > 0 || ans.Feed != nil {
		t.Errorf("a follower's Sync was asked %+v; want nothing", ans)
	}
	all, err := tg.Mirror.SiteHealth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("health recorded: %+v; want node-2's alone", all)
	}
	got := all[0]
	if got.Site != tg.Site || got.Node != "node-2" || got.Backlog != 3 || got.Replica != h.Replica ||
		len(got.Operations) != 1 || got.Operations[0].Parked != 1 || got.ReportedAt.IsZero() {
		t.Errorf("health recorded: %+v; want %+v", got, h)
	}
}

func syncRelaysCommands(t *testing.T, tg SitesTarget) {
	ctx := t.Context()
	if _, err := tg.Mirror.ReportSiteCalls(ctx, tg.Site, []ports.Operation{NewOp("op-p", 4, ports.OpParked)}, BaseTime); err != nil {
		t.Fatal(err)
	}
	cmd := ports.SiteCommand{ID: "0190a000-0000-7000-8000-000000000001", Site: tg.Site, OperationID: "op-p",
		Action: ports.SiteRetry, Actor: "alice", RequestedAt: BaseTime, State: ports.CommandRequested}
	if err := tg.Mirror.RequestSiteCommands(ctx, []ports.SiteCommand{cmd}); err != nil {
		t.Fatal(err)
	}
	ans := mustSync(t, tg, leader(tg, 0))
	if len(ans.Commands) != 1 || ans.Commands[0].ID != cmd.ID || ans.Commands[0].Action != ports.SiteRetry ||
		ans.Commands[0].OperationID != "op-p" || ans.Commands[0].Actor != "alice" {
		t.Fatalf("the leader's Sync got %+v; want the Retry of op-p", ans.Commands)
	}
	ans = mustSync(t, tg, leader(tg, 0, ports.CommandAnswer{ID: cmd.ID, State: ports.CommandApplied}))
	if len(ans.Commands) != 0 {
		t.Errorf("an answered command came again: %+v", ans.Commands)
	}
	cmds, err := tg.Mirror.SiteCommands(ctx, tg.Site, "op-p")
	if err != nil || len(cmds) != 1 || cmds[0].State != ports.CommandApplied {
		t.Errorf("the command after its answer: %+v, %v; want Applied", cmds, err)
	}
}

func feedPageMovesCursor(t *testing.T, tg SitesTarget) {
	ans := mustSync(t, tg, leader(tg, 0))
	if ans.Feed == nil || *ans.Feed != (ports.SiteCursor{}) {
		t.Fatalf("the first leader Sync asked for the feed %+v; want it from the start", ans.Feed)
	}
	mustReport(t, tg, ports.OpReport{Site: tg.Site, Ops: []ports.Operation{NewOp("op-f", 2, ports.OpDelivered)},
		Feed: &ports.FeedPage{Epoch: "epoch-1", From: "", Next: "pos-1", Last: true}})
	c, err := tg.Mirror.SiteCursor(t.Context(), tg.Site)
	if err != nil || c != (ports.SiteCursor{Epoch: "epoch-1", After: "pos-1"}) {
		t.Errorf("cursor after the page: %+v, %v; want epoch-1/pos-1", c, err)
	}
	mirrorRow(t, tg, "op-f")
}

func syncWaits(t *testing.T, tg SitesTarget) {
	mustSync(t, tg, leader(tg, 0)) // the first asks for the feed
	mustReport(t, tg, ports.OpReport{Site: tg.Site, Feed: &ports.FeedPage{Epoch: "epoch-1", Next: "pos-1", Last: true}})
	const wait = 300 * time.Millisecond
	start := time.Now()
	ans := mustSync(t, tg, leader(tg, wait))
	if took := time.Since(start); took < wait || len(ans.Commands) > 0 || ans.Feed != nil {
		t.Errorf("a leader's Sync with nothing to ask answered %+v after %s; want nothing after %s", ans, took, wait)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := tg.Central.Sync(ctx, leader(tg, ports.MaxSyncWait))
		done <- err
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(ports.MaxSyncWait - 5*time.Second):
		t.Error("a Sync went on waiting after its caller cancelled it")
	}
}
