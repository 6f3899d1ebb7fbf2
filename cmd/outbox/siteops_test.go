package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/raftbuffer"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// erpServer is an external system: POST /orders answers 503 until up is
// set, 400 to an order without an item, and 201 otherwise. It counts the
// calls it accepted per Idempotency-Key.
type erpServer struct {
	*httptest.Server
	up       atomic.Bool
	mu       sync.Mutex
	accepted map[string]int
	refused  atomic.Int64
}

func newERP(t *testing.T) *erpServer {
	e := &erpServer{accepted: map[string]int{}}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.up.Load() {
			e.refused.Add(1)
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Get("item") == "" && r.ContentLength < 12 {
			http.Error(w, "no item", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.accepted[r.Header.Get("Idempotency-Key")]++
		e.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":"A-1"}`)
	}))
	t.Cleanup(e.Close)
	return e
}

// TestSiteCachedCallThroughAGroup runs a three-node site as outbox site
// wires it, with an external system defined in its configuration. A
// script's cached call through a follower, with the system down, is
// buffered (Pending) on every node; once the system is back the leader
// delivers it once, and every node's tracking row says Delivered. A call
// the system refuses for good comes back to the script as an error, its
// row Failed.
func TestSiteCachedCallThroughAGroup(t *testing.T) {
	erp := newERP(t)
	t.Setenv("OUTBOX_TEST_CENTRAL_TOKEN", "unused-no-central-listens")
	ids := []string{"a", "b", "c"}
	g := startLoopbackGroup(t, ids, func(_ string, cfg *SiteConfig) {
		cfg.Core.Site = "plant-1"
		cfg.Central = CentralLinkConfig{Addr: freeLoopback(t), Token: "env:OUTBOX_TEST_CENTRAL_TOKEN"}
		cfg.Targets.Systems = []opgateway.System{{Name: "erp", BaseURL: erp.URL,
			Methods:       []opgateway.Method{{Name: "order", Verb: http.MethodPost, Path: "/orders"}},
			RetryInterval: 100 * time.Millisecond, MaxRetries: 1000}}
	})
	members, follower := g.members, g.follower(t)

	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	c, err := notify.Dial(members[follower].API)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Call(sctx, "erp", "order", map[string]any{"item": "valve", "qty": 2})
	if err != nil || res.Operation.Status != ports.OpPending {
		t.Fatalf("a call with the system down: %+v, %v; want it buffered (Pending)", res.Operation, err)
	}
	// Every node holds it, and answers its status on its own.
	for i := range ids {
		n, err := notify.Dial(members[i].API)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		waittest.For(t, 30*time.Second, fmt.Sprintf("node %s to track %s", ids[i], res.ID), waittest.Holds(func() bool {
			got, err := n.Tracking(sctx, res.ID)
			return err == nil && got[res.ID].Status.Buffered()
		}))
	}

	// The node's health counts it: one call waiting for a retry.
	waittest.For(t, 30*time.Second, "the follower's health to count the buffered call", func() (bool, string) {
		h, err := c.Health(sctx, members[follower].API)
		for _, k := range h.Operations {
			if k.Kind == ports.OpCall {
				return k.Backlog == 1 && !k.OldestBufferedAt.IsZero(), fmt.Sprintf("%+v", k)
			}
		}
		return false, fmt.Sprint(h.Operations, err)
	})

	erp.up.Store(true)
	for i := range ids {
		n, err := notify.Dial(members[i].API)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		waittest.For(t, 30*time.Second, fmt.Sprintf("node %s to track %s Delivered", ids[i], res.ID), func() (bool, string) {
			got, err := n.Tracking(sctx, res.ID)
			return err == nil && got[res.ID].Status == ports.OpDelivered, fmt.Sprint(got[res.ID].Status, err)
		})
	}
	erp.mu.Lock()
	if erp.accepted[res.ID] != 1 || len(erp.accepted) != 1 {
		t.Errorf("the system accepted %v, want the call once, under its tracked id", erp.accepted)
	}
	erp.mu.Unlock()
	if erp.refused.Load() < 1 {
		t.Error("the system never refused the call while down")
	}

	_, err = c.Call(sctx, "erp", "order", map[string]any{})
	var oe *notify.OperationError
	if !errors.Is(err, notify.ErrFailed) || !errors.As(err, &oe) || oe.Operation.Status != ports.OpFailed {
		t.Fatalf("an order the system refuses: %v, want ErrFailed with the Failed row", err)
	}

	// The same through the CLI, as an operator at the site would.
	env := append(childEnv(), "OUTBOX_SITE_ADDR="+members[follower].API)
	code, out, errw := runCLI(t, env, "", "call", "-params", `{"item":"pump","qty":1}`, "erp", "order")
	if code != 0 || !strings.Contains(out, "Delivered") || !strings.Contains(out, `answer: {"order":"A-1"}`) {
		t.Fatalf("outbox call: exit %d\n%s%s", code, out, errw)
	}
	code, out, errw = runCLI(t, env, "", "call", "-params", `{}`, "erp", "order")
	if code != 1 || !strings.Contains(out, "Failed") || !strings.Contains(errw, "400") {
		t.Fatalf("outbox call refused for good: exit %d\n%s%s", code, out, errw)
	}
	code, out, errw = runCLI(t, env, "", "tracking", "status", res.ID)
	if code != 0 || !strings.Contains(out, res.ID) || !strings.Contains(out, "erp.order") || !strings.Contains(out, "Delivered") {
		t.Fatalf("outbox tracking status: exit %d\n%s%s", code, out, errw)
	}
	// A follower applies what the leader committed a heartbeat later: the
	// list through it holds both refused calls once it has.
	waittest.For(t, 30*time.Second, "the follower's list to hold both refused calls", func() (bool, string) {
		code, out, errw = runCLI(t, env, "", "tracking", "list", "-status", "Failed")
		return code == 0 && strings.Count(out, "Failed") == 2 && !strings.Contains(out, "Delivered"), out + errw
	})
	code, out, errw = runCLI(t, env, "", "notify", "health")
	if code != 0 || !strings.Contains(out, "operations ExternalCall: backlog 0, parked 0") {
		t.Fatalf("outbox notify health: exit %d\n%s%s", code, out, errw)
	}
	code, _, errw = runCLI(t, env, "", "tracking", "retry", res.ID)
	if code != 1 || !strings.Contains(errw, "Delivered") {
		t.Fatalf("outbox tracking retry of a delivered call: exit %d\n%s", code, errw)
	}
}

// TestSiteOperationsRetention: a one-node site with operations.retention
// and operations.purge_interval short purges a finished operation's
// tracking row, and the site then knows it no more.
func TestSiteOperationsRetention(t *testing.T) {
	erp := newERP(t)
	erp.up.Store(true)
	t.Setenv("OUTBOX_TEST_CENTRAL_TOKEN", "unused-no-central-listens")
	g := startLoopbackGroup(t, []string{"a"}, func(_ string, cfg *SiteConfig) {
		cfg.Core.Site = "plant-1"
		cfg.Central = CentralLinkConfig{Addr: freeLoopback(t), Token: "env:OUTBOX_TEST_CENTRAL_TOKEN"}
		cfg.Core.OpRetention, cfg.Core.OpPurgeInterval = 200*time.Millisecond, 50*time.Millisecond
		cfg.Targets.Systems = []opgateway.System{{Name: "erp", BaseURL: erp.URL,
			Methods: []opgateway.Method{{Name: "order", Verb: http.MethodPost, Path: "/orders"}}}}
	})
	c, err := notify.Dial(g.members[0].API)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	var res notify.Result
	waittest.For(t, 30*time.Second, "a delivered call", func() (bool, string) {
		var err error
		res, err = c.Call(sctx, "erp", "order", map[string]any{"item": "valve"})
		return err == nil && res.Delivered(), fmt.Sprint(res.Operation.Status, err)
	})
	waittest.For(t, 30*time.Second, "the finished row purged", func() (bool, string) {
		got, err := c.Tracking(sctx, res.ID)
		_, known := got[res.ID]
		return err == nil && !known, fmt.Sprint(got, err)
	})
}

// loopbackGroup is a site group run in this process as outbox site wires
// it, on loopback listeners, until the test ends.
type loopbackGroup struct {
	members []MemberConfig
	mu      sync.Mutex
	nodes   []*raftbuffer.Node // set as each node starts
}

// startLoopbackGroup starts one node per id; configure sets each node's
// configuration on top of the defaults and its node, data directory and
// members. A node that fails fails the test.
func startLoopbackGroup(t *testing.T, ids []string, configure func(id string, cfg *SiteConfig)) *loopbackGroup {
	t.Helper()
	dir := t.TempDir()
	g := &loopbackGroup{nodes: make([]*raftbuffer.Node, len(ids))}
	var raftLis, apiLis []net.Listener
	for _, id := range ids {
		r, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		raftLis, apiLis = append(raftLis, r), append(apiLis, a)
		g.members = append(g.members, MemberConfig{ID: id, Raft: r.Addr().String(), API: a.Addr().String()})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for i := range ids {
			_ = raftLis[i].Close()
			_ = apiLis[i].Close()
		}
	})
	for i, id := range ids {
		cfg := defaultSiteConfig()
		cfg.Node, cfg.DataDir, cfg.Members = id, filepath.Join(dir, id), g.members
		configure(id, &cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		opt := siteOptions{raftListener: raftLis[i], apiListener: apiLis[i],
			started: func(_ string, n *raftbuffer.Node) { g.mu.Lock(); g.nodes[i] = n; g.mu.Unlock() }}
		wg.Go(func() {
			if err := runSiteNode(ctx, cfg, opt, slog.New(slog.DiscardHandler)); err != nil {
				t.Errorf("node %s: %v", id, err)
			}
		})
	}
	return g
}

// follower waits for an elected leader and returns the index of a node
// that follows it.
func (g *loopbackGroup) follower(t *testing.T) int {
	t.Helper()
	follower := -1
	waittest.For(t, 30*time.Second, "a follower of an elected leader", waittest.Holds(func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, n := range g.nodes {
			if n == nil {
				continue
			}
			if leader, self := n.Leader(); leader != "" && !self {
				follower = i
			}
		}
		return follower >= 0
	}))
	return follower
}
