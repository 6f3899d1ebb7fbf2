package acceptance

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// blipProxy is a TCP proxy on loopback between a store and its PostgreSQL
// server that can blip: cut every connection and refuse new ones (its port
// closed), then take connections again on the same port.
type blipProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	cut   int // connections cut by blips
	wg    sync.WaitGroup
}

func startBlipProxy(t *testing.T, target string) *blipProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blipProxy{t: t, target: target, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		p.closeLocked()
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// serve accepts on ln until it is closed.
func (p *blipProxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // a blip began meanwhile
				p.mu.Unlock()
				_, _ = c.Close(), up.Close()
				continue
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_, _ = dst.Close(), src.Close()
				p.mu.Lock()
				delete(p.conns, dst)
				delete(p.conns, src)
				p.mu.Unlock()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
}

func (p *blipProxy) closeLocked() {
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
		p.cut++
	}
}

// down cuts every connection and refuses new ones.
func (p *blipProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

// up takes connections again, on the same port.
func (p *blipProxy) up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("proxy: listen again on %s: %v", p.addr, err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serve(ln)
}

// recordCounter counts the Record calls of a store and those that failed.
type recordCounter struct {
	*sqlstore.Notifications
	calls, failed atomic.Int64
}

func (r *recordCounter) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	r.calls.Add(1)
	lost, err := r.Notifications.Record(ctx, owner, updates)
	if err != nil {
		r.failed.Add(1)
	}
	return lost, err
}

// tallyChannel counts deliveries per notification, and calls onDelivery
// with the running total.
type tallyChannel struct {
	mu         sync.Mutex
	per        map[string]int
	total      int
	onDelivery func(total int)
}

func (c *tallyChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.mu.Lock()
	c.per[d.Notification.ID]++
	c.total++
	n := c.total
	c.mu.Unlock()
	c.onDelivery(n)
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// TestAPostgresBlipCostsNoDuplicate: the connections to PostgreSQL are cut
// in the middle of dispatch and refused for a second, as in a restart of
// the server. Every notification is delivered exactly once: the outcomes
// that could not be written are written when the server is back, within
// the lease, and the batches submitted meanwhile are acknowledged.
func TestAPostgresBlipCostsNoDuplicate(t *testing.T) {
	const (
		before = 1500 // stored before the dispatcher starts
		during = 1500 // submitted while it runs, in batches
		batch  = 50
		sent   = before + during
	)
	ctx := context.Background()
	sc := postgresBackend.config(t)
	u, err := url.Parse(sc.DSN)
	if err != nil {
		t.Fatal(err)
	}
	direct := open(t, sc) // migrates; the test reads through it, never blipped
	proxy := startBlipProxy(t, u.Host)
	u.Host = proxy.addr
	viaProxy, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sc.Driver, DSN: u.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxy.Close() })
	store := &recordCounter{Notifications: viaProxy.Notifications()}

	// The blip: at the before/3-th delivery, in the middle of a batch, the
	// proxy cuts every connection and refuses new ones. It takes them
	// again a second later, once a Record has failed (so that the test
	// cannot pass without the path it tests).
	var blips sync.WaitGroup
	defer blips.Wait()
	var downAt time.Time
	ch := &tallyChannel{per: make(map[string]int), onDelivery: func(total int) {
		if total != before/3 {
			return
		}
		proxy.down()
		downAt = time.Now()
		blips.Go(func() {
			time.Sleep(time.Second) // the outage itself, not a wait for an outcome
			for limit := time.Now().Add(time.Minute); store.failed.Load() == 0 && time.Now().Before(limit); {
				time.Sleep(10 * time.Millisecond)
			}
			proxy.up()
		})
	}}
	dir, err := memdir.New(testLists, testChannels)
	if err != nil {
		t.Fatal(err)
	}
	logs := &guardtest.LogBuffer{}
	// A short lease, so that a row whose outcome is not recorded is
	// delivered again (and counted twice) within the test's wait.
	svc, err := core.New(core.Config{DispatchInterval: 100 * time.Millisecond, ClaimLease: 20 * time.Second,
		DeliveryTimeout: 5 * time.Second}, core.Deps{
		Store: store, Audit: store, Directory: dir, Channels: ports.ChannelMap{"email": ch},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(n int) ([]string, error) {
		subs := make([]ports.Submission, n)
		for i := range subs {
			subs[i] = submission("ops")
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the site's call timeout
		defer cancel()
		res, err := svc.Submit(cctx, ports.SubmitRequest{Notifications: subs})
		if err == nil && len(res.Accepted) != n {
			err = fmt.Errorf("accepted %d of %d: %+v", len(res.Accepted), n, res.Rejected)
		}
		return res.Accepted, err
	}
	var ids []string
	for range before / batch {
		got, err := submit(batch)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}

	e := &env{t: t}
	stop := e.run(svc)
	defer stop()
	var submitErrs []error
	for range during / batch {
		got, err := submit(batch)
		if err != nil {
			submitErrs = append(submitErrs, err)
			continue
		}
		ids = append(ids, got...)
	}
	blips.Wait()

	// Wait for every row to be Delivered, reading past the proxy.
	waittest.For(t, 2*time.Minute, fmt.Sprintf("all %d rows Delivered", len(ids)), func() (bool, string) {
		n, err := direct.Notifications().Count(ctx, ports.Filter{Statuses: []ports.Status{ports.StatusDelivered}})
		if err != nil {
			t.Fatal(err)
		}
		return int(n) >= len(ids), fmt.Sprintf("%d Delivered", n)
	})
	stop()

	ch.mu.Lock()
	delivered, dups, lost := 0, 0, 0
	for _, id := range ids {
		switch n := ch.per[id]; {
		case n == 0:
			lost++
		case n > 1:
			dups++
		}
		if ch.per[id] > 0 {
			delivered++
		}
	}
	ch.mu.Unlock()
	// Every history holds the attempt that delivered the row once (one
	// record, its status Delivered): none dropped when a Record's answer
	// was lost, none written twice when an Append's was.
	gaps := 0
	for _, id := range ids {
		hist, err := direct.Notifications().History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, h := range hist {
			kinds = append(kinds, string(h.Kind)+"/"+string(h.Status))
		}
		if got := strings.Join(kinds, ","); got != "Attempted/Delivered" {
			if gaps++; gaps <= 5 {
				t.Errorf("history of %s: %s, want Attempted/Delivered", id, got)
			}
		}
	}
	var warnRecord, afterAll, errorLines int
	for _, l := range logs.Lines() {
		switch {
		case strings.Contains(l, "level=WARN") && strings.Contains(l, "record outcomes failed; trying again"):
			warnRecord++
		case strings.Contains(l, "recorded these rows after all"):
			afterAll++
		case strings.Contains(l, "level=ERROR"):
			errorLines++
		}
	}
	proxy.mu.Lock()
	cut := proxy.cut
	proxy.mu.Unlock()
	t.Logf("sent %d (acknowledged %d, submit errors %d), delivered %d, lost %d, duplicates %d; "+
		"connections cut %d, Record calls %d, failed %d (retried: %d WARN lines; batches found recorded after all: %d), "+
		"histories not exactly Attempted/Delivered %d, ERROR lines %d",
		sent, len(ids), len(submitErrs), delivered, lost, dups, cut, store.calls.Load(), store.failed.Load(), warnRecord,
		afterAll, gaps, errorLines)
	if len(submitErrs) > 0 {
		t.Errorf("%d Submits failed through the blip, first: %v", len(submitErrs), submitErrs[0])
	}
	if lost != 0 || dups != 0 || len(ids) != sent {
		t.Errorf("lost %d, duplicates %d, acknowledged %d of %d: want none lost, none twice, all acknowledged",
			lost, dups, len(ids), sent)
	}
	if cut == 0 || store.failed.Load() == 0 {
		t.Errorf("the blip cut %d connections and failed %d Records: the test tested nothing", cut, store.failed.Load())
	}
	if downAt.IsZero() {
		t.Error("no blip")
	}
	for _, l := range logs.Lines() {
		if strings.Contains(l, "level=ERROR") {
			t.Logf("ERROR line: %s", l)
		}
	}
}
