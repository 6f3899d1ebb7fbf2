package acceptance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/ports"
)

// The site tests run real `outbox site` processes —
// a pair plus a witness, a pair, single nodes — against central in this
// process, and kill, stop and restart them. They count at central: every
// Send that returned an id must arrive, and duplicates are bounded by the
// Sends in flight at a crash.

// burst is a burst of Sends from concurrent callers through one client.
type burst struct {
	prefix   string
	inFlight atomic.Int64
	returned atomic.Int64
	// reached is closed once mark Sends have returned; done once all have.
	reached chan struct{}
	done    chan struct{}

	mu         sync.Mutex
	ok         map[string]string // id → subject of every Send that returned an id
	failed     []error
	maxLatency time.Duration
}

// startBurst sends total notifications from callers goroutines, each Send
// with a 30 s deadline. The burst ends by itself; the test's end cancels
// what is left of it and waits for its goroutines.
func startBurst(t *testing.T, c *notify.Client, prefix string, total, callers int, mark int64) *burst {
	ctx, cancel := context.WithCancel(context.Background())
	b := &burst{prefix: prefix, reached: make(chan struct{}), done: make(chan struct{}), ok: make(map[string]string, total)}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) || ctx.Err() != nil {
					return
				}
				subject := fmt.Sprintf("%s-%04d", prefix, i)
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				b.inFlight.Add(1)
				start := time.Now()
				id, err := c.To("ops").Send(sctx, subject, "Tank 3 level 93% at 08:00.")
				took := time.Since(start)
				b.inFlight.Add(-1)
				scancel()
				b.mu.Lock()
				if err != nil {
					b.failed = append(b.failed, fmt.Errorf("send %s: %w", subject, err))
				} else {
					b.ok[id] = subject
				}
				b.maxLatency = max(b.maxLatency, took)
				b.mu.Unlock()
				if b.returned.Add(1) == mark {
					close(b.reached)
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	return b
}

// waitMark waits until the burst's mark is reached.
func (b *burst) waitMark(t *testing.T) {
	t.Helper()
	select {
	case <-b.reached:
	case <-b.done:
		t.Fatalf("burst %s ended before its mark (%d returned)", b.prefix, b.returned.Load())
	case <-time.After(3 * time.Minute):
		t.Fatalf("burst %s: mark not reached within 3 minutes (%d returned)", b.prefix, b.returned.Load())
	}
}

// wait waits for every Send of the burst to return; each has a 30 s
// deadline.
func (b *burst) wait(t *testing.T) {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("burst %s not over within 5 minutes (%d returned)", b.prefix, b.returned.Load())
	}
}

// results returns the ids sent and the failures.
func (b *burst) results() (map[string]string, []error, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ok, b.failed, b.maxLatency
}

// checkBurstAtCentral waits until every id the burst got arrived at central
// and returns the duplicates (rows beyond the first per subject).
func checkBurstAtCentral(t *testing.T, c *centralLink, b *burst, total int) (ok map[string]string, failed []error, dups int, maxLatency time.Duration) {
	t.Helper()
	ok, failed, maxLatency = b.results()
	for i, err := range failed {
		if i == 5 {
			t.Errorf("… and %d more failed Sends", len(failed)-5)
			break
		}
		t.Errorf("a Send with a 30 s deadline failed: %v", err)
	}
	c.awaitAll(idsOf(ok), arriveTimeout)
	rows := c.subjects(sitePlant1)
	for _, subject := range ok {
		if rows[subject] == 0 {
			t.Errorf("subject %s: its Send returned an id, but central holds no row", subject)
		}
	}
	for subject := range rows {
		if !strings.HasPrefix(subject, b.prefix+"-") {
			t.Errorf("central holds a row with subject %q nobody sent", subject)
		}
	}
	if len(rows) > total {
		t.Errorf("central holds %d subjects; %d were sent", len(rows), total)
	}
	return ok, failed, duplicates(rows), maxLatency
}

// TestSiteLeaderKilledMidBurst: kill -9 of the site leader during a
// burst of Sends loses none that returned an id, and the killed node rejoins.
func TestSiteLeaderKilledMidBurst(t *testing.T) {
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, threeVoters)
	g.startAll()
	g.leader()

	const total, callers, mark = 5000, 16, 1500
	b := startBurst(t, g.client, "c01", total, callers, mark)
	b.waitMark(t)
	victim := g.leader()
	before := b.inFlight.Load()
	killedAt := time.Now()
	victim.kill()
	inFlight := max(before, b.inFlight.Load())
	next := g.leader(victim)
	elected := time.Since(killedAt)
	// leader waits for a data node: if the witness won the election, this
	// includes its hand-over.
	t.Logf("killed leader %s with %d Sends in flight after %d returned; data node %s leads %s later",
		victim.id, inFlight, b.returned.Load(), next.id, elected.Round(time.Millisecond))
	b.wait(t)

	ok, failed, dups, maxLatency := checkBurstAtCentral(t, c, b, total)
	t.Logf("sent ok %d, failed %d, duplicates %d (bound %d), time to new leader %s, slowest Send %s",
		len(ok), len(failed), dups, inFlight, elected.Round(time.Millisecond), maxLatency.Round(time.Millisecond))
	if int64(dups) > inFlight {
		t.Errorf("%d duplicate rows at central; at most %d (the Sends in flight at the kill) are allowed", dups, inFlight)
	}

	restarted := time.Now()
	victim.start()
	victim.waitHealth(leaderTimeout, "rejoined as a follower", func(h ports.SiteHealth) bool {
		return h.Replica.Role == ports.RoleFollower && h.Replica.Leader != ""
	})
	g.waitBacklog(0, arriveTimeout)
	t.Logf("node %s restarted, rejoined and caught up in %s", victim.id, time.Since(restarted).Round(time.Millisecond))
}

// TestSiteFollowerKilled: kill -9 of a follower during a burst loses
// nothing, and the follower rejoins and catches up.
func TestSiteFollowerKilled(t *testing.T) {
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, threeVoters)
	g.startAll()
	leader := g.leader()
	victim := g.followerOf(leader)

	const total, callers, mark = 2000, 8, 600
	b := startBurst(t, g.client, "c02", total, callers, mark)
	b.waitMark(t)
	before := b.inFlight.Load()
	victim.kill()
	inFlight := max(before, b.inFlight.Load())
	b.wait(t)

	ok, failed, dups, maxLatency := checkBurstAtCentral(t, c, b, total)
	t.Logf("killed follower %s with %d Sends in flight; sent ok %d, failed %d, duplicates %d, slowest Send %s",
		victim.id, inFlight, len(ok), len(failed), dups, maxLatency.Round(time.Millisecond))
	if int64(dups) > inFlight {
		t.Errorf("%d duplicate rows at central; at most %d (the Sends in flight at the kill) are allowed", dups, inFlight)
	}

	restarted := time.Now()
	victim.start()
	victim.waitHealth(leaderTimeout, "rejoined as a follower", func(h ports.SiteHealth) bool {
		return h.Replica.Role == ports.RoleFollower && h.Replica.Leader != ""
	})
	g.waitBacklog(0, arriveTimeout)
	t.Logf("node %s restarted, rejoined and caught up in %s", victim.id, time.Since(restarted).Round(time.Millisecond))
}

// TestSiteBuffersWhileCentralIsDown: while central is
// unreachable the site buffers every Send and says so in its health; when
// central is back, the backlog drains to it.
func TestSiteBuffersWhileCentralIsDown(t *testing.T) {
	c := newCentral(t) // its link is down
	g := newSiteGroup(t, c, threeVoters)
	g.startAll()
	leader := g.leader()

	sent := g.sendAll("c03", 500, 8)
	h := leader.waitHealth(30*time.Second, "backlog 500 and a central error", func(h ports.SiteHealth) bool {
		return h.Backlog == 500 && h.LastCentralError != ""
	})
	if h.OldestEnqueuedAt.IsZero() {
		t.Errorf("health with a backlog of 500 has no oldest enqueue time: %+v", h)
	}
	t.Logf("leader %s while central is down: backlog %d, last central error %q", leader.id, h.Backlog, h.LastCentralError)
	g.waitBacklog(500, 30*time.Second)

	ids := idsOf(sent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := g.client.Status(ctx, ids[0]); err != nil || st != ports.StatusForwarding {
		t.Fatalf("Status of a buffered notification = %q, %v; want %s", st, err, ports.StatusForwarding)
	}

	c.up()
	c.awaitAll(ids, arriveTimeout)
	g.waitBacklog(0, arriveTimeout)
	if n := c.count(sitePlant1); n != 500 {
		t.Errorf("central holds %d rows of %s, want 500", n, sitePlant1)
	}
	if d := duplicates(c.subjects(sitePlant1)); d != 0 {
		t.Errorf("%d duplicate rows at central; central was down, not crashed", d)
	}
	leader.waitHealth(30*time.Second, "contact with central, no error", func(h ports.SiteHealth) bool {
		return h.LastCentralError == "" && !h.LastCentralContact.IsZero()
	})
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := g.client.Status(ctx, ids[0]); err != nil || st != ports.StatusPending {
		t.Fatalf("Status of a forwarded notification = %q, %v; want central's %s", st, err, ports.StatusPending)
	}
}

// TestSiteGroupRestartKeepsTheBuffer: a whole site group stopped and
// started again keeps its backlog, and forwards it once.
func TestSiteGroupRestartKeepsTheBuffer(t *testing.T) {
	c := newCentral(t) // its link is down
	g := newSiteGroup(t, c, threeVoters)
	g.startAll()
	g.leader()

	sent := g.sendAll("c04", 300, 8)
	g.waitBacklog(300, 30*time.Second)
	g.stopAll()
	g.startAll()
	leader := g.leader()
	h := leader.waitHealth(30*time.Second, "backlog 300 after the restart", func(h ports.SiteHealth) bool {
		return h.Backlog == 300
	})
	t.Logf("after the restart %s leads with a backlog of %d", leader.id, h.Backlog)

	c.up()
	c.awaitAll(idsOf(sent), arriveTimeout)
	g.waitBacklog(0, arriveTimeout)
	rows := c.subjects(sitePlant1)
	if len(rows) != 300 || duplicates(rows) != 0 {
		t.Errorf("central holds %d subjects with %d duplicate rows; want 300 subjects, each once", len(rows), duplicates(rows))
	}
}

// TestSiteRecoverPair: a pair that lost a node accepts no Send, until
// `outbox site recover` makes the survivor the only member; then it leads
// alone and forwards what it held and what it gets.
func TestSiteRecoverPair(t *testing.T) {
	c := newCentral(t) // its link is down, so the pair holds what it gets
	g := newSiteGroup(t, c, siteSpec{Nodes: []string{"a", "b"}})
	g.startAll()
	g.leader()
	before := g.sendAll("c05-before", 100, 4)
	g.waitBacklog(100, 30*time.Second)

	a, b := g.node("a"), g.node("b")
	b.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := g.client.To("ops").Send(ctx, "c05-no-quorum", "no quorum")
	cancel()
	if !isUnavailable(err) {
		t.Fatalf("Send without a quorum: err = %v, want one wrapping %v", err, ports.ErrUnavailable)
	}

	a.stop()
	digest := dirDigest(t, a.dataDir())
	code, out, errOut := runOutbox(t, "site", "recover", "-config", a.config)
	if code != 2 {
		t.Fatalf("recover without -yes: exit %d, want 2\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out+errOut, "-yes") {
		t.Errorf("recover without -yes does not say to give -yes:\n%s%s", out, errOut)
	}
	if dirDigest(t, a.dataDir()) != digest {
		t.Fatal("recover without -yes changed the node's data")
	}
	if code, out, errOut := runOutbox(t, "site", "recover", "-config", a.config, "-yes"); code != 0 {
		t.Fatalf("recover -yes: exit %d, want 0\n%s%s", code, out, errOut)
	}

	a.start()
	a.waitHealth(leaderTimeout, "leads alone with its backlog", func(h ports.SiteHealth) bool {
		return h.Replica.Role == ports.RoleLeader && h.Backlog >= 100
	})
	after := g.sendAll("c05-after", 50, 4)
	c.up()
	c.awaitAll(append(idsOf(before), idsOf(after)...), arriveTimeout)
	a.waitHealth(arriveTimeout, "backlog 0", func(h ports.SiteHealth) bool { return h.Backlog == 0 })
	if d := duplicates(c.subjects(sitePlant1)); d != 0 {
		t.Errorf("%d duplicate rows at central", d)
	}
}

// TestSiteLinkRefusesStrangers: a site with a wrong token, and a
// site forging another's id, get nothing into central; their Sends stay
// buffered, never dropped.
func TestSiteLinkRefusesStrangers(t *testing.T) {
	c := newCentral(t)
	c.up()
	const wrongToken = "not-a-token-central-knows"
	stranger := newSiteGroup(t, c, siteSpec{Nodes: []string{"s"}, Token: wrongToken})
	forger := newSiteGroup(t, c, siteSpec{Site: sitePlant2, Nodes: []string{"f"}, Token: tokenPlant1})
	startNodes(t, stranger.nodes[0], forger.nodes[0])
	stranger.leader()
	forger.leader()

	strangers := stranger.sendAll("c06-stranger", 20, 4)
	forged := forger.sendAll("c06-forged", 20, 4)

	h := stranger.nodes[0].waitHealth(30*time.Second, "an unauthenticated error", func(h ports.SiteHealth) bool {
		return h.Backlog == 20 && containsFold(h.LastCentralError, "unauthenticated")
	})
	if strings.Contains(h.LastCentralError, wrongToken) {
		t.Errorf("the health's central error shows the token: %q", h.LastCentralError)
	}
	// Central answered the forger (it is plant-1 to central) and rejected
	// every row; the forwarder offers them again after its interval.
	first := forger.nodes[0].waitHealth(30*time.Second, "an answer from central", func(h ports.SiteHealth) bool {
		return !h.LastCentralContact.IsZero()
	})
	forger.nodes[0].waitHealth(30*time.Second, "central asked again, nothing dropped", func(h ports.SiteHealth) bool {
		return h.LastCentralContact.After(first.LastCentralContact) && h.Backlog == 20
	})

	for site, ids := range map[string]map[string]string{"stranger": strangers, "forger": forged} {
		missing, err := c.missing(idsOf(ids))
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) != len(ids) {
			t.Errorf("central stored %d of the %s's notifications; want none", len(ids)-len(missing), site)
		}
	}
	if n := c.count(""); n != 0 {
		t.Errorf("central holds %d rows; want none", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := forger.client.Status(ctx, idsOf(forged)[0]); err != nil || st != ports.StatusForwarding {
		t.Errorf("Status of a forged notification = %q, %v; want %s", st, err, ports.StatusForwarding)
	}
	forger.nodes[0].waitHealth(30*time.Second, "still buffered", func(h ports.SiteHealth) bool { return h.Backlog == 20 })
	for _, n := range []*siteNode{stranger.nodes[0], forger.nodes[0]} {
		log := n.tail(1 << 20)
		for _, secret := range []string{wrongToken, tokenPlant1} {
			if strings.Contains(log, secret) {
				t.Errorf("node %s's log shows a token", n.id)
			}
		}
	}
}

// TestNotifyCLI: `outbox notify send|status|health` against a site.
func TestNotifyCLI(t *testing.T) {
	c := newCentral(t) // its link is down until the end
	g := newSiteGroup(t, c, siteSpec{Nodes: []string{"n"}})
	g.startAll()
	g.leader()
	// A dead address first: any node will do, the CLI tries the next.
	addrs := freeAddr(t) + "," + g.addrs

	code, out, errOut := runOutbox(t, "notify", "send", "-site", addrs, "-list", "ops", "-subject", "hi", "-body", "there")
	if code != 0 {
		t.Fatalf("notify send: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	if _, err := uuid.Parse(id); err != nil {
		t.Fatalf("notify send printed %q, not an id", out)
	}

	code, out, errOut = runOutbox(t, "notify", "status", "-site", addrs, id)
	if code != 0 || out != id+" Forwarding\n" {
		t.Fatalf("notify status: exit %d, printed %q, want %q\n%s", code, out, id+" Forwarding\n", errOut)
	}

	code, out, errOut = runOutbox(t, "notify", "send", "-site", addrs, "-list", "ops", "-subject", strings.Repeat("s", 300), "-body", "x")
	if code != 2 || out != "" || !containsFold(errOut, "subject") {
		t.Fatalf("notify send with a 300-byte subject: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, out, errOut)
	}

	// The site API refuses it too, whatever the client: the rule is the
	// site's own.
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := g.client.To("ops").Send(sctx, " ", "")
	scancel()
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "subject and body are both empty") {
		t.Fatalf("Send without a subject or a body through the site API: %v, want ErrInvalid saying so", err)
	}
	code, out, errOut = runOutbox(t, "notify", "send", "-site", addrs, "-list", "ops")
	if code != 2 || out != "" || !strings.Contains(errOut, "give -subject, -body or both") {
		t.Fatalf("notify send without a subject or a body: exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, out, errOut)
	}

	code, out, errOut = runOutbox(t, "notify", "health", "-site", g.nodes[0].api)
	if code != 0 || !strings.Contains(out, "role: leader\n") || !strings.Contains(out, "backlog: 1\n") {
		t.Fatalf("notify health: exit %d, printed\n%s\nwant role: leader and backlog: 1 (the refused Send buffered nothing)\n%s", code, out, errOut)
	}

	c.up()
	c.awaitAll([]string{id}, arriveTimeout)
	// Central stores the row before the site drops it from its buffer (after
	// the acknowledgement, through Raft): until then the site says Forwarding.
	g.waitBacklog(0, arriveTimeout)
	code, out, errOut = runOutbox(t, "notify", "status", "-site", addrs, id)
	if code != 0 || out != id+" Pending\n" {
		t.Fatalf("notify status after forwarding: exit %d, printed %q, want %q\n%s", code, out, id+" Pending\n", errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	row, err := c.store.Notifications().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if row.Subject != "hi" || row.Body != "there" || row.List != "ops" || row.SourceSite != sitePlant1 || row.SourceScript != "outbox-cli" {
		t.Errorf("central's row = %+v; want subject hi, body there, list ops, from %s by outbox-cli", row, sitePlant1)
	}
}
