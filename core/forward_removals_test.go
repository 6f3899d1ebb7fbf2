package core

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// removeGate is a membuffer whose first Remove waits at a gate, and whose
// Removes are recorded; fail makes the next Remove fail as a lost
// leadership does.
type removeGate struct {
	*membuffer.Buffer
	gate chan struct{}

	mu      sync.Mutex
	removes [][]string
	fail    bool
	failing bool // every Remove fails while set
}

func (g *removeGate) Remove(ctx context.Context, ids []string) error {
	g.mu.Lock()
	g.removes = append(g.removes, slices.Clone(ids))
	first, fail := len(g.removes) == 1, g.fail || g.failing
	g.fail = false
	g.mu.Unlock()
	if first && g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return fmt.Errorf("gated: %w: %w", ctx.Err(), ports.ErrUnavailable)
		}
	}
	if fail {
		return fmt.Errorf("gated: node lost its leadership: %w", ports.ErrUnavailable)
	}
	return g.Buffer.Remove(ctx, ids)
}

func (g *removeGate) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(g.removes))
	for i, r := range g.removes {
		out[i] = len(r)
	}
	return out
}

// newRemovalEnv returns a site forwarding in batches of two from a
// removeGate holding n notifications.
func newRemovalEnv(t *testing.T, n int) (*Site, *removeGate, *flakyCentral, []string) {
	t.Helper()
	buf := &removeGate{Buffer: membuffer.New("a")}
	central := newFlakyCentral(t, "plant-1")
	s, err := NewSite(SiteConfig{Site: "plant-1", ForwardBatch: 2, RetryInterval: 20 * time.Millisecond},
		SiteDeps{Buffer: buf, Central: central})
	if err != nil {
		t.Fatal(err)
	}
	var subs []ports.Submission
	var ids []string
	for i := range n {
		id := uuid.Must(uuid.NewV7()).String()
		ids = append(ids, id)
		subs = append(subs, ports.Submission{ID: id, List: "ops", Subject: fmt.Sprint(i), SourceSite: "plant-1",
			SiteEnqueuedAt: time.Now().UTC()})
	}
	if err := buf.Append(context.Background(), subs); n > 0 && err != nil {
		t.Fatal(err)
	}
	return s, buf, central, ids
}

func forwardUntilEnd(t *testing.T, s *Site) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Forward(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func TestAcksThatArriveDuringARemovalGoInTheNextOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, buf, central, ids := newRemovalEnv(t, 6)
		buf.gate = make(chan struct{})
		release := sync.OnceFunc(func() { close(buf.gate) })
		defer release()
		forwardUntilEnd(t, s)
		// The first removal is held: the forwarder sends the other batches
		// meanwhile, without waiting for it.
		synctest.Wait()
		for _, id := range ids {
			if !central.stored(t, id) {
				t.Errorf("%s not at central while the first removal is held", id)
			}
		}
		release()
		synctest.Wait()
		if st, _ := buf.Stats(context.Background()); st.Count != 0 {
			t.Errorf("buffer holds %d, want 0", st.Count)
		}
		if got := buf.sizes(); !slices.Equal(got, []int{2, 4}) {
			t.Errorf("Removes of %v ids, want [2 4]: the first batch's, then the two acknowledged while it ran", got)
		}
		if n := central.submits.Load(); n != 3 {
			t.Errorf("%d Submits, want 3", n)
		}
	})
}

func TestAFailedRemovalSendsAgainAndLosesNothing(t *testing.T) {
	s, buf, central, ids := newRemovalEnv(t, 6)
	buf.fail = true
	forwardUntilEnd(t, s)
	waittest.For(t, 10*time.Second, "an empty buffer", drained(buf))
	for _, id := range ids {
		if !central.stored(t, id) {
			t.Errorf("%s never reached central", id)
		}
	}
	// What the failed removal left was sent again (central keeps it once),
	// and removed.
	if n := central.submits.Load(); n <= 3 {
		t.Errorf("%d Submits: the notifications the failed removal left were not sent again", n)
	}
}

func TestAcksOfATrickleShareOneRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, buf, central, _ := newRemovalEnv(t, 0)
		s.cfg.ForwardBatch = 500
		forwardUntilEnd(t, s)
		for i := range 3 {
			id, err := s.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(forwardLinger) // the forwarder's wait for more Sends
			synctest.Wait()           // forwarded, its removal waiting for company
			if !central.stored(t, id) {
				t.Fatalf("Send %d not forwarded", i)
			}
			if got := buf.sizes(); len(got) != 0 {
				t.Fatalf("Removes %v after Send %d, want none before removeLinger", got, i)
			}
		}
		time.Sleep(removeLinger)
		synctest.Wait()
		if got := buf.sizes(); !slices.Equal(got, []int{3}) {
			t.Errorf("Removes of %v ids, want one of 3", got)
		}
		if st, _ := buf.Stats(context.Background()); st.Count != 0 {
			t.Errorf("buffer holds %d after removeLinger, want 0", st.Count)
		}
	})
}

func (g *removeGate) setFailing(v bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = v
}

// sendNow sends one notification and returns its id.
func sendNow(t *testing.T, s *Site, subject string) string {
	t.Helper()
	id, err := s.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAcknowledgedIDsAreRemovedWhileTheNextSubmitHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, buf, central, _ := newRemovalEnv(t, 0)
		s.cfg.ForwardBatch = 500
		s.cfg.CallTimeout = time.Minute
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release()
		forwardUntilEnd(t, s)
		first := sendNow(t, s, "1")
		time.Sleep(forwardLinger)
		synctest.Wait()
		if !central.stored(t, first) {
			t.Fatal("the first Send not forwarded")
		}
		// Central holds the next Submit: the acknowledged id is removed
		// all the same, removeLinger after its acknowledgement.
		central.onSubmit = func(ports.SubmitRequest) { <-hold }
		sendNow(t, s, "2")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := buf.sizes(); !slices.Equal(got, []int{1}) {
			t.Errorf("Removes of %v ids while the next Submit hangs, want one of 1", got)
		}
		if in, _ := buf.Contains(context.Background(), []string{first}); in[first] {
			t.Error("the acknowledged notification still buffered 2 s later")
		}
		release()
	})
}

func TestAnIDAcknowledgedDuringARemovalGoesWhenItEndsIfDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, buf, central, _ := newRemovalEnv(t, 0)
		s.cfg.ForwardBatch = 500
		buf.gate = make(chan struct{})
		release := sync.OnceFunc(func() { close(buf.gate) })
		defer release()
		forwardUntilEnd(t, s)
		sendNow(t, s, "1")
		time.Sleep(forwardLinger + removeLinger)
		synctest.Wait() // its Remove started, held at the gate
		second := sendNow(t, s, "2")
		time.Sleep(time.Second)
		synctest.Wait() // forwarded, acknowledged, due long ago
		if !central.stored(t, second) {
			t.Fatal("the second Send not forwarded")
		}
		if got := buf.sizes(); !slices.Equal(got, []int{1}) {
			t.Fatalf("Removes %v, want the first only while it is held", got)
		}
		release()
		synctest.Wait() // no time passes: the due id goes at once
		if got := buf.sizes(); !slices.Equal(got, []int{1, 1}) {
			t.Errorf("Removes %v, want [1 1]", got)
		}
		if st, _ := buf.Stats(context.Background()); st.Count != 0 {
			t.Errorf("buffer holds %d, want 0", st.Count)
		}
	})
}

func TestTheForwarderWaitsForARemovalAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Batches of 2: at most removalsLimit × 2 = 8 acknowledged ids not
		// yet removed. The first Remove (2 ids) is held; the forwarder
		// sends on until 2 + 6 are acknowledged, then waits.
		s, buf, central, _ := newRemovalEnv(t, 20)
		buf.gate = make(chan struct{})
		release := sync.OnceFunc(func() { close(buf.gate) })
		defer release()
		forwardUntilEnd(t, s)
		synctest.Wait()
		if n := central.submits.Load(); n != 4 {
			t.Errorf("%d Submits while the first Remove is held, want 4", n)
		}
		release()
		time.Sleep(time.Second)
		synctest.Wait()
		if st, _ := buf.Stats(context.Background()); st.Count != 0 {
			t.Errorf("buffer holds %d, want 0", st.Count)
		}
		if got := buf.sizes(); len(got) < 2 || got[0] != 2 || got[1] != 6 {
			t.Errorf("Removes of %v ids, want [2 6 ...]: the held one, then the six acknowledged meanwhile", got)
		}
	})
}

func TestAFailedRemovalSendsAgainFromTheOldestAfterACentralFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first batch's Remove fails for good; central fails the second
		// batch. The forwarder, finding its removal failed before it
		// pauses, starts again from the oldest: the first batch.
		s, buf, central, ids := newRemovalEnv(t, 6)
		buf.setFailing(true)
		var mu sync.Mutex
		var firsts []string
		central.onSubmit = func(req ports.SubmitRequest) {
			mu.Lock()
			defer mu.Unlock()
			firsts = append(firsts, req.Notifications[0].ID)
			central.down.Store(len(firsts) == 2)
			if len(firsts) == 3 {
				buf.setFailing(false)
			}
		}
		forwardUntilEnd(t, s)
		time.Sleep(time.Second)
		synctest.Wait()
		if st, _ := buf.Stats(context.Background()); st.Count != 0 {
			t.Errorf("buffer holds %d, want 0", st.Count)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(firsts) < 3 || firsts[0] != ids[0] || firsts[1] != ids[2] || firsts[2] != ids[0] {
			t.Errorf("Submits starting at %v; want the first batch, the second, the first again (ids %v)", firsts, ids[:3])
		}
	})
}
