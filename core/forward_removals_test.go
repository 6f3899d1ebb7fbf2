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
}

func (g *removeGate) Remove(ctx context.Context, ids []string) error {
	g.mu.Lock()
	g.removes = append(g.removes, slices.Clone(ids))
	first, fail := len(g.removes) == 1, g.fail
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
	s, buf, central, ids := newRemovalEnv(t, 6)
	buf.gate = make(chan struct{})
	forwardUntilEnd(t, s)
	// The first removal is held: the forwarder sends the other batches
	// meanwhile, without waiting for it.
	waittest.For(t, 10*time.Second, "every batch at central", func() (bool, string) {
		n := 0
		for _, id := range ids {
			if central.stored(t, id) {
				n++
			}
		}
		return n == len(ids), fmt.Sprintf("%d of %d stored", n, len(ids))
	})
	close(buf.gate)
	waittest.For(t, 10*time.Second, "an empty buffer", drained(buf))
	if got := buf.sizes(); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Removes of %v ids, want [2 4]: the first batch's, then the two acknowledged while it ran", got)
	}
	if n := central.submits.Load(); n != 3 {
		t.Errorf("%d Submits, want 3", n)
	}
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
