package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// gatedBuffer is a membuffer whose Appends are recorded, can be held at a
// gate, refuse a notification, or commit and then answer unavailable, as
// a Raft leader that lost its leadership after the entry went out.
type gatedBuffer struct {
	*membuffer.Buffer
	gate chan struct{} // each Append waits for it to close; nil: no wait
	// gates, when set, are the gates of the first Appends, one each, in
	// order; the Appends after them wait for gate.
	gates []chan struct{}

	mu     sync.Mutex
	calls  [][]string // the ids of each Append
	refuse string     // an Append holding this id is refused
	lose   bool       // the next Append of more than one commits, then fails
}

func (g *gatedBuffer) Append(ctx context.Context, ns []ports.Submission) error {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	g.mu.Lock()
	g.calls = append(g.calls, ids)
	refused := slices.Contains(ids, g.refuse)
	lose := g.lose && len(ns) > 1
	if lose {
		g.lose = false
	}
	gate := g.gate
	if n := len(g.calls) - 1; n < len(g.gates) {
		gate = g.gates[n]
	}
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return fmt.Errorf("gated: %w: %w", ctx.Err(), ports.ErrUnavailable)
		}
	}
	if refused {
		return fmt.Errorf("gated: notification %s refused: %w", g.refuse, ports.ErrInvalid)
	}
	if err := g.Buffer.Append(ctx, ns); err != nil {
		return err
	}
	if lose {
		return fmt.Errorf("gated: leadership lost, outcome unknown: %w", ports.ErrUnavailable)
	}
	return nil
}

// appends returns the sizes of the Appends so far.
func (g *gatedBuffer) appends() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(g.calls))
	for i, c := range g.calls {
		out[i] = len(c)
	}
	return out
}

// newGatedSite returns a site on a gatedBuffer whose gate is shut.
func newGatedSite(t *testing.T) (*Site, *gatedBuffer) {
	t.Helper()
	buf := &gatedBuffer{Buffer: membuffer.New("a"), gate: make(chan struct{})}
	s, err := NewSite(SiteConfig{Site: "plant-1"}, SiteDeps{Buffer: buf, Central: newFlakyCentral(t, "plant-1")})
	if err != nil {
		t.Fatal(err)
	}
	return s, buf
}

// queued returns how many Sends wait for the next batch.
func queued(s *Site) int {
	s.sends.mu.Lock()
	defer s.sends.mu.Unlock()
	return len(s.sends.queue)
}

// sendOutcome is what one Send answered.
type sendOutcome struct {
	id  string
	err error
}

// startSends starts a Send of each id while the first Append is held at
// the gate: a lone caller that went at once, and the others queued behind
// it. It returns the outcomes' channels, the lone caller's first.
func startSends(t *testing.T, s *Site, buf *gatedBuffer, ids []string) []chan sendOutcome {
	t.Helper()
	out := make([]chan sendOutcome, len(ids))
	send := func(i int) {
		out[i] = make(chan sendOutcome, 1)
		go func() {
			id, err := s.Send(sendCtx(t), ports.SendRequest{ID: ids[i], List: "ops", Subject: "s" + ids[i]})
			out[i] <- sendOutcome{id, err}
		}()
	}
	send(0)
	// The lone caller waits for nobody: its Append starts at once.
	waittest.For(t, 10*time.Second, "the first Send's Append", func() (bool, string) {
		return len(buf.appends()) == 1, fmt.Sprintf("appends %v", buf.appends())
	})
	for i := 1; i < len(ids); i++ {
		send(i)
	}
	waittest.For(t, 10*time.Second, "the other Sends queued", func() (bool, string) {
		n := queued(s)
		return n == len(ids)-1, fmt.Sprintf("%d queued", n)
	})
	return out
}

func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	return ids
}

func TestSendsThatArriveDuringAnAppendGoInTheNextOne(t *testing.T) {
	s, buf := newGatedSite(t)
	ids := newIDs(21)
	outs := startSends(t, s, buf, ids)
	close(buf.gate)
	for i, ch := range outs {
		if o := <-ch; o.err != nil || o.id != ids[i] {
			t.Errorf("Send %d = %q, %v; want its own id %s", i, o.id, o.err, ids[i])
		}
	}
	if got := buf.appends(); !slices.Equal(got, []int{1, 20}) {
		t.Errorf("Appends of %v notifications, want [1 20]: the lone Send, then the 20 that waited together", got)
	}
	if st, _ := buf.Stats(context.Background()); st.Count != 21 {
		t.Errorf("buffer holds %d, want 21", st.Count)
	}
}

func TestARefusalInABatchFailsOnlyItsCaller(t *testing.T) {
	s, buf := newGatedSite(t)
	ids := newIDs(11)
	buf.refuse = ids[5]
	outs := startSends(t, s, buf, ids)
	close(buf.gate)
	for i, ch := range outs {
		o := <-ch
		if i == 5 {
			if !errors.Is(o.err, ports.ErrInvalid) {
				t.Errorf("refused Send = %q, %v; want ErrInvalid", o.id, o.err)
			}
			continue
		}
		if o.err != nil || o.id != ids[i] {
			t.Errorf("Send %d = %q, %v; want its own id", i, o.id, o.err)
		}
	}
	got, _ := buf.Contains(context.Background(), ids)
	for i, id := range ids {
		if got[id] != (i != 5) {
			t.Errorf("notification %d buffered %t", i, got[id])
		}
	}
}

func TestLeadershipLostMidBatchAnswersEveryCallerWhoSendsAgainOnce(t *testing.T) {
	s, buf := newGatedSite(t)
	buf.lose = true
	ids := newIDs(16)
	outs := startSends(t, s, buf, ids)
	close(buf.gate)
	var again []int
	for i, ch := range outs {
		o := <-ch
		switch {
		case i == 0 && o.err != nil:
			t.Errorf("the lone Send = %v; its Append succeeded", o.err)
		case i > 0 && !errors.Is(o.err, ports.ErrUnavailable):
			t.Errorf("Send %d of the lost batch = %q, %v; want ErrUnavailable", i, o.id, o.err)
		case i > 0:
			again = append(again, i)
		}
	}
	// Each caller told to try again sends again, with its id: the buffer
	// keeps each notification once.
	var wg sync.WaitGroup
	for _, i := range again {
		wg.Go(func() {
			id, err := s.Send(sendCtx(t), ports.SendRequest{ID: ids[i], List: "ops", Subject: "s"})
			if err != nil || id != ids[i] {
				t.Errorf("Send %d again = %q, %v", i, id, err)
			}
		})
	}
	wg.Wait()
	if st, _ := buf.Stats(context.Background()); st.Count != int64(len(ids)) {
		t.Errorf("buffer holds %d, want %d: each once", st.Count, len(ids))
	}
}

func TestAQueuedSendWhoseContextEndsIsAnsweredAndNotAppended(t *testing.T) {
	s, buf := newGatedSite(t)
	ids := newIDs(2)
	first := make(chan error, 1)
	go func() {
		_, err := s.Send(sendCtx(t), ports.SendRequest{ID: ids[0], List: "ops", Subject: "s"})
		first <- err
	}()
	waittest.For(t, 10*time.Second, "the first Send's Append", func() (bool, string) {
		return len(buf.appends()) == 1, fmt.Sprintf("appends %v", buf.appends())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	second := make(chan error, 1)
	go func() {
		_, err := s.Send(ctx, ports.SendRequest{ID: ids[1], List: "ops", Subject: "s"})
		second <- err
	}()
	waittest.For(t, 10*time.Second, "the second Send queued", func() (bool, string) {
		return queued(s) == 1, fmt.Sprintf("%d queued", queued(s))
	})
	cancel()
	if err := <-second; !errors.Is(err, ports.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Send = %v; want ErrUnavailable and Canceled", err)
	}
	close(buf.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := buf.appends(); !slices.Equal(got, []int{1}) {
		t.Errorf("Appends %v, want [1]: the cancelled Send left the queue", got)
	}
	if n := queued(s); n != 0 {
		t.Errorf("%d still queued", n)
	}
}

func TestManyConcurrentSendsAreEachBufferedOnce(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{})
	const callers, each = 32, 25
	var wg sync.WaitGroup
	got := make([][]string, callers)
	for c := range callers {
		wg.Go(func() {
			for range each {
				id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
				if err != nil {
					t.Error(err)
					return
				}
				got[c] = append(got[c], id)
			}
		})
	}
	wg.Wait()
	all := slices.Concat(got...)
	in, err := e.buf.Contains(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != callers*each || len(in) != len(all) {
		t.Errorf("%d answered, %d of them buffered; want %d", len(all), len(in), callers*each)
	}
	if st, _ := e.buf.Stats(context.Background()); st.Count != int64(callers*each) {
		t.Errorf("buffer holds %d, want %d", st.Count, callers*each)
	}
	if n := queued(e.site); n != 0 || e.site.sends.busy {
		t.Errorf("after the Sends: %d queued, busy %t", n, e.site.sends.busy)
	}
}

func TestBatchTakesBoundedCountAndBytes(t *testing.T) {
	b := newSendBatcher(nil)
	big := ports.Submission{Body: string(make([]byte, sendBatchBytes/2))}
	for range 3 {
		b.queue = append(b.queue, &pendingSend{sub: big})
	}
	if n := len(b.take()); n != 1 {
		t.Errorf("took %d of three half-limit notifications, want 1", n)
	}
	b.queue = nil
	for range sendBatchMax + 5 {
		b.queue = append(b.queue, &pendingSend{sub: ports.Submission{Subject: "s"}})
	}
	if n := len(b.take()); n != sendBatchMax {
		t.Errorf("took %d, want %d", n, sendBatchMax)
	}
	if len(b.queue) != 5 {
		t.Errorf("%d left, want 5", len(b.queue))
	}
	b.queue = []*pendingSend{{sub: ports.Submission{Body: string(make([]byte, 2*sendBatchBytes))}}}
	if n := len(b.take()); n != 1 {
		t.Errorf("took %d of one oversized notification, want it alone", n)
	}
}

func TestACallerIsAnsweredAtItsOwnDeadlineWhateverTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
		buf := &gatedBuffer{Buffer: membuffer.New("a"), gates: gates}
		release := sync.OnceFunc(func() { close(gates[1]) })
		defer release() // on a failure too, so that every Send returns
		s, err := NewSite(SiteConfig{Site: "plant-1"}, SiteDeps{Buffer: buf, Central: newFlakyCentral(t, "plant-1")})
		if err != nil {
			t.Fatal(err)
		}
		ids := newIDs(3)
		send := func(id string, d time.Duration) chan error {
			out := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				_, err := s.Send(ctx, ports.SendRequest{ID: id, List: "ops", Subject: "s"})
				out <- err
			}()
			synctest.Wait()
			return out
		}
		a := send(ids[0], 30*time.Second) // alone: its Append waits at the first gate
		b := send(ids[1], 300*time.Millisecond)
		c := send(ids[2], 30*time.Second)
		close(gates[0]) // B and C go in the second Append, held at its gate
		synctest.Wait()
		if err := <-a; err != nil {
			t.Fatalf("A = %v", err)
		}
		if got := buf.appends(); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("Appends %v, want [1 2]", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-b:
			if !errors.Is(err, ports.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("B past its deadline = %v; want outcome unknown (ErrUnavailable, DeadlineExceeded)", err)
			}
		default:
			t.Fatal("B unanswered 1 s after its 300 ms deadline: held by a batch with a later deadline")
		}
		release()
		synctest.Wait()
		if err := <-c; err != nil {
			t.Errorf("C = %v", err)
		}
		// B's notification went on in the batch: sent again, it is kept
		// once.
		got, _ := buf.Contains(context.Background(), ids)
		if len(got) != 3 {
			t.Errorf("buffered %v, want the three", got)
		}
	})
}

func TestACallerHandedTheLeadAfterItsContextEndedStillLeads(t *testing.T) {
	// The caller's context was cancelled as the lead reached it: it leads
	// all the same, so that the others in its batch are answered. Each
	// round may take either path of await (the answer or the context
	// first); both must lead.
	for range 20 {
		buf := &gatedBuffer{Buffer: membuffer.New("a")}
		b := newSendBatcher(buf)
		b.busy = true // the former leader's Append just ended
		ids := newIDs(2)
		now := time.Now()
		pending := func(id string, d time.Duration) *pendingSend {
			return &pendingSend{sub: ports.Submission{ID: id, List: "ops", Subject: "s"},
				deadline: now.Add(d), taken: true, answer: make(chan sendAnswer, 1)}
		}
		self, other := pending(ids[0], 30*time.Second), pending(ids[1], 10*time.Second)
		self.answer <- sendAnswer{lead: []*pendingSend{other, self}}
		ctx, cancel := context.WithDeadline(context.Background(), self.deadline)
		cancel()
		if err := b.await(ctx, self); err != nil {
			t.Fatalf("the leader's own outcome = %v; its notification was appended", err)
		}
		if a := <-other.answer; a.err != nil || a.lead != nil {
			t.Fatalf("the other caller got %+v, want success", a)
		}
		if got, _ := buf.Contains(context.Background(), ids); len(got) != 2 {
			t.Fatalf("buffered %v, want both", got)
		}
		if b.busy {
			t.Fatal("still busy after the batch, with nothing queued")
		}
	}
}

func TestTheNextBatchIsLedByItsLatestDeadline(t *testing.T) {
	b := newSendBatcher(membuffer.New("a"))
	now := time.Now()
	ids := newIDs(4)
	for i, d := range []time.Duration{time.Second, 3 * time.Second, 2 * time.Second} {
		b.queue = append(b.queue, &pendingSend{sub: ports.Submission{ID: ids[i], List: "ops", Subject: "s"},
			deadline: now.Add(d), answer: make(chan sendAnswer, 1)})
	}
	q := slices.Clone(b.queue)
	b.busy = true
	self := &pendingSend{sub: ports.Submission{ID: ids[3], List: "ops", Subject: "s"}, deadline: now.Add(time.Minute)}
	if err := b.lead(sendCtx(t), []*pendingSend{self}, self); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-q[1].answer:
		if len(a.lead) != 3 {
			t.Errorf("lead of %d, want the 3 queued", len(a.lead))
		}
	default:
		t.Error("the caller with the latest deadline was not handed the lead")
	}
}

func TestABatchIsNoLargerThanOneNotificationAtTheDefaultLimits(t *testing.T) {
	// Raft holds entries in memory by the count (its log cache, an
	// AppendEntries): a batch must not make an entry larger than a lone
	// Send at the default limits could.
	one := (&pendingSend{sub: ports.Submission{Subject: strings.Repeat("s", DefaultMaxSubjectBytes),
		Body: strings.Repeat("b", DefaultMaxBodyBytes)}}).size()
	if sendBatchBytes > one {
		t.Errorf("sendBatchBytes %d, larger than one notification at the default limits (%d)", sendBatchBytes, one)
	}
}
