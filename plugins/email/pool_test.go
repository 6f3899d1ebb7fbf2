package email

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports/waittest"
)

// gate holds every message at DATA until it is opened, counting the ones
// held, so that a test can tell how many connections deliver at once.
type gate struct {
	held atomic.Int64
	open chan struct{}
	once sync.Once
}

// newGate returns a closed gate, opened at the end of the test at the
// latest.
func newGate(t *testing.T) *gate {
	g := &gate{open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// release opens the gate.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// data is a serverConfig.data hook.
func (g *gate) data() error {
	g.held.Add(1)
	<-g.open
	return nil
}

// deliverAll starts n deliveries of settings at once and returns a wait
// for their results, each checked to be Success.
func deliverAll(t *testing.T, ch *Channel, settings map[string]string, n int) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			wantOutcome(t, deliver(t, ch, testRequest(settings, fmt.Sprintf("user%d@example.com", i))), channel.Success)
		})
	}
	return wg.Wait
}

// TestPoolGrowsToTheDefaultBound checks that, with pool_size unset, the
// pool opens a connection for each waiting delivery up to 16 (the default
// that carries a steady 1,000 messages/s), and no more: the deliveries
// beyond it wait for a connection and reuse it.
func TestPoolGrowsToTheDefaultBound(t *testing.T) {
	g := newGate(t)
	srv := newTestServer(t, serverConfig{data: g.data})
	ch := newChannel(t, nil)
	const deliveries = defaultPoolSize + 4
	wait := deliverAll(t, ch, srv.settings(t), deliveries)
	waittest.For(t, 20*time.Second, "16 messages held at DATA at once", func() (bool, string) {
		n := g.held.Load()
		return n >= 16, fmt.Sprintf("%d held, %d connections", n, srv.accepted.Load())
	})
	g.release()
	wait()
	if n := srv.accepted.Load(); n != 16 {
		t.Errorf("%d deliveries at once opened %d connections, want the default bound 16", deliveries, n)
	}
	if n := len(srv.messages()); n != deliveries {
		t.Errorf("server got %d messages, want %d", n, deliveries)
	}
}

// TestIdleConnectionsClosed checks that the pool shrinks: connections left
// idle for maxIdle are closed (with QUIT) without any delivery to notice,
// and the next delivery opens a new one.
func TestIdleConnectionsClosed(t *testing.T) {
	g := newGate(t)
	srv := newTestServer(t, serverConfig{data: g.data})
	ch := newChannel(t, nil)
	ch.maxIdle = 200 * time.Millisecond
	settings := srv.settings(t, "pool_size", "4")
	wait := deliverAll(t, ch, settings, 4)
	waittest.For(t, 20*time.Second, "4 messages held at DATA at once", func() (bool, string) {
		n := g.held.Load()
		return n >= 4, fmt.Sprintf("%d held", n)
	})
	g.release()
	wait()
	if n := srv.accepted.Load(); n != 4 {
		t.Fatalf("4 deliveries at once opened %d connections, want 4", n)
	}
	// Nothing is delivered now: the idle timer alone closes them.
	srv.waitClosed(t, 4)
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	if n := srv.accepted.Load(); n != 5 {
		t.Errorf("%d connections after the idle ones were closed, want 5", n)
	}
	// The one left idle is closed as well.
	srv.waitClosed(t, 1)
}

// TestCloseWaitsForTheIdleTimer checks that Close returns only once the
// idle timer's closing is over: a connection the timer is closing (its QUIT
// unanswered) is no longer being closed when Close returns. The stacks are
// searched for the closing itself, not for reap: reap's goroutine lets Close
// return as its last act, and may still be leaving reap when they are read.
func TestCloseWaitsForTheIdleTimer(t *testing.T) {
	quitSeen := make(chan struct{}, 1)
	answer := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(answer) }) }
	t.Cleanup(release)
	srv := newTestServer(t, serverConfig{quit: func() {
		select {
		case quitSeen <- struct{}{}:
		default:
		}
		<-answer // the reply to QUIT waits until the test has looked
	}})
	ch := New(nil)
	ch.maxIdle = 50 * time.Millisecond
	wantOutcome(t, deliver(t, ch, testRequest(srv.settings(t), testTargets...)), channel.Success)
	select {
	case <-quitSeen: // the idle timer is closing the connection
	case <-time.After(20 * time.Second):
		t.Fatal("the idle connection was not closed within 20s")
	}
	_ = ch.Close()
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	release()
	for _, f := range []string{"email.closeAll", "email.(*smtpConn).close"} {
		if strings.Contains(stacks, f) {
			t.Errorf("%s still runs after Close returned", f)
		}
	}
}
