package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// flakyCentral is central in process (a Service on memstore) behind a switch
// that makes it unreachable, with a hook on each Submit.
type flakyCentral struct {
	svc   *Service
	store *memstore.Store
	down  atomic.Bool
	// site is the authenticated site every Submit is made as.
	site     string
	submits  atomic.Int64
	onSubmit func(ports.SubmitRequest)
	// throttle, while positive, refuses that many more Submits as over
	// quota, asking for a wait of throttleAfter.
	throttle      atomic.Int64
	throttleAfter time.Duration
}

func newFlakyCentral(t *testing.T, site string) *flakyCentral {
	t.Helper()
	return newFlakyCentralWith(t, site, Config{})
}

func newFlakyCentralWith(t *testing.T, site string, cfg Config) *flakyCentral {
	t.Helper()
	store := memstore.New()
	svc, err := New(cfg, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{}, Directory: okDirectory{}})
	if err != nil {
		t.Fatal(err)
	}
	return &flakyCentral{svc: svc, store: store, site: site}
}

func (c *flakyCentral) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	c.submits.Add(1)
	if c.onSubmit != nil {
		c.onSubmit(req)
	}
	if c.down.Load() {
		return ports.SubmitResult{}, fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	if c.throttle.Add(-1) >= 0 {
		return ports.SubmitResult{}, fmt.Errorf("central: submit: %w",
			&ports.RetryLaterError{After: c.throttleAfter, Reason: "the site is over its ingest quota"})
	}
	req.Site = c.site
	return c.svc.Submit(ctx, req)
}

func (c *flakyCentral) Status(ctx context.Context, req ports.StatusRequest) (map[string]ports.Status, error) {
	if c.down.Load() {
		return nil, fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	req.Site = c.site
	return c.svc.Status(ctx, req)
}

func (c *flakyCentral) ReportOperations(ctx context.Context, req ports.OpReport) error {
	if c.down.Load() {
		return fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	req.Site = c.site
	return c.svc.ReportOperations(ctx, req)
}

func (c *flakyCentral) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	if c.down.Load() {
		return ports.SyncAnswer{}, fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	req.Site = c.site
	return c.svc.Sync(ctx, req)
}

func (c *flakyCentral) stored(t *testing.T, id string) bool {
	t.Helper()
	_, err := c.store.Get(context.Background(), id)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

type siteEnv struct {
	site    *Site
	buf     *membuffer.Buffer
	central *flakyCentral
}

func newSiteEnv(t *testing.T, cfg SiteConfig) *siteEnv {
	t.Helper()
	if cfg.Site == "" {
		cfg.Site = "plant-1"
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 20 * time.Millisecond
	}
	buf := membuffer.New("a")
	central := newFlakyCentral(t, cfg.Site)
	s, err := NewSite(cfg, SiteDeps{Buffer: buf, Central: central})
	if err != nil {
		t.Fatal(err)
	}
	return &siteEnv{site: s, buf: buf, central: central}
}

// forward runs the forwarder until the test ends.
func (e *siteEnv) forward(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.site.Forward(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func sendCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// drained is the condition of a forwarder that sent everything: an empty
// buffer.
func drained(b ports.Buffer) func() (bool, string) {
	return func() (bool, string) {
		st, err := b.Stats(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return st.Count == 0, fmt.Sprintf("%d notifications buffered", st.Count)
	}
}

func TestSendStampsProvenanceAndBuffers(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{})
	before := time.Now().UTC()
	id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "pump 3", Body: "pressure low",
		SourceInstance: "line-2", SourceScript: "alarms.py", ExecutionID: "x1", ParentExecutionID: "x0"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		t.Fatalf("id %q is not a UUIDv7 (%v)", id, err)
	}
	items, err := e.buf.Scan(context.Background(), 0, 10)
	if err != nil || len(items) != 1 {
		t.Fatalf("buffer holds %d, %v; want 1", len(items), err)
	}
	got := items[0].Submission
	if got.ID != id || got.SourceSite != "plant-1" || got.List != "ops" || got.SourceScript != "alarms.py" ||
		got.SourceInstance != "line-2" || got.ExecutionID != "x1" || got.ParentExecutionID != "x0" {
		t.Errorf("buffered %+v", got)
	}
	if got.SiteEnqueuedAt.Before(before) || got.SiteEnqueuedAt.Location() != time.UTC {
		t.Errorf("enqueued at %v, want UTC after %v", got.SiteEnqueuedAt, before)
	}
}

func TestSendWithCallerIDIsBufferedOnce(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{})
	id := strings.ToUpper(uuid.NewString())
	for range 3 {
		got, err := e.site.Send(sendCtx(t), ports.SendRequest{ID: id, List: "ops", Subject: "s"})
		if err != nil || got != strings.ToLower(id) {
			t.Fatalf("Send = %q, %v; want the caller's id in canonical form", got, err)
		}
	}
	if st, _ := e.buf.Stats(context.Background()); st.Count != 1 {
		t.Errorf("buffer holds %d, want 1", st.Count)
	}
}

func TestSendRefusesBadInputAndBuffersNothing(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{MaxSubjectBytes: 10, MaxBodyBytes: 20})
	ok := ports.SendRequest{List: "ops", Subject: "s", Body: "b"}
	cases := map[string]struct {
		req  func(r *ports.SendRequest)
		ctx  context.Context
		want string
	}{
		"empty list":                {req: func(r *ports.SendRequest) { r.List = " " }, want: "list is empty"},
		"subject too long":          {req: func(r *ports.SendRequest) { r.Subject = strings.Repeat("x", 11) }, want: "subject is 11 bytes, over the limit of 10"},
		"body too long":             {req: func(r *ports.SendRequest) { r.Body = strings.Repeat("x", 21) }, want: "body is 21 bytes, over the limit of 20"},
		"invalid UTF-8":             {req: func(r *ports.SendRequest) { r.Body = "a\xffb" }, want: "body is not valid UTF-8"},
		"NUL":                       {req: func(r *ports.SendRequest) { r.Subject = "a\x00" }, want: "subject holds a NUL byte"},
		"bad id":                    {req: func(r *ports.SendRequest) { r.ID = "42" }, want: "not a UUID"},
		"long script":               {req: func(r *ports.SendRequest) { r.SourceScript = strings.Repeat("s", 201) }, want: "source script is 201 bytes"},
		"missing deadline":          {ctx: context.Background(), want: "deadline"},
		"two broken fields":         {req: func(r *ports.SendRequest) { r.List = ""; r.Body = "\xff" }, want: "list is empty; body is not valid UTF-8"},
		"no subject, no body":       {req: func(r *ports.SendRequest) { r.Subject = ""; r.Body = "" }, want: "subject and body are both empty"},
		"blank subject, blank body": {req: func(r *ports.SendRequest) { r.Subject = " \t"; r.Body = "\n" }, want: "subject and body are both empty"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req := ok
			if c.req != nil {
				c.req(&req)
			}
			ctx := c.ctx
			if ctx == nil {
				ctx = sendCtx(t)
			}
			_, err := e.site.Send(ctx, req)
			if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v; want ErrInvalid saying %q", err, c.want)
			}
		})
	}
	if st, _ := e.buf.Stats(context.Background()); st.Count != 0 {
		t.Errorf("buffer holds %d after bad input, want 0", st.Count)
	}
}

func TestSendOffTheLeaderIsUnavailable(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{})
	e.buf.SetAvailable(false)
	_, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestForwarderDeliversAndEmptiesTheBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSiteEnv(t, SiteConfig{ForwardBatch: 7})
		e.forward(t)
		var ids []string
		for i := range 50 {
			id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		waittest.For(t, time.Minute, "an empty buffer", drained(e.buf))
		for _, id := range ids {
			if !e.central.stored(t, id) {
				t.Fatalf("%s never reached central", id)
			}
		}
		h, err := e.site.Health(context.Background())
		if err != nil || h.LastCentralContact.IsZero() || h.LastCentralError != "" || h.Backlog != 0 {
			t.Errorf("health %+v, %v", h, err)
		}
	})
}

func TestForwarderBatchesByBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSiteEnv(t, SiteConfig{ForwardBatch: 100, ForwardBatchBytes: 1000})
		var mu sync.Mutex
		var sizes []int
		e.central.onSubmit = func(r ports.SubmitRequest) {
			mu.Lock()
			sizes = append(sizes, len(r.Notifications))
			mu.Unlock()
		}
		for range 10 {
			if _, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Body: strings.Repeat("b", 300)}); err != nil {
				t.Fatal(err)
			}
		}
		e.forward(t)
		waittest.For(t, time.Minute, "an empty buffer", drained(e.buf))
		mu.Lock()
		defer mu.Unlock()
		for _, n := range sizes {
			if n > 3 {
				t.Errorf("a batch of %d notifications of 300 bytes; ForwardBatchBytes 1000 allows 3", n)
			}
		}
	})
}

// TestForwarderKeepsEverythingWhileCentralIsDown, in miniature: Sends
// go on, the backlog grows and Health says why, and all of it arrives once
// central is back.
func TestForwarderKeepsEverythingWhileCentralIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSiteEnv(t, SiteConfig{})
		e.central.down.Store(true)
		e.forward(t)
		var ids []string
		for range 20 {
			id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		waittest.For(t, time.Minute, "several failed submits", func() (bool, string) {
			n := e.central.submits.Load()
			return n >= 3, fmt.Sprintf("%d submits", n)
		})
		h, err := e.site.Health(context.Background())
		if err != nil || h.Backlog != 20 || h.OldestEnqueuedAt.IsZero() || !strings.Contains(h.LastCentralError, "connection refused") {
			t.Fatalf("health while central is down: %+v, %v", h, err)
		}
		st, err := e.site.Status(sendCtx(t), ids[:1])
		if err != nil || st[ids[0]] != ports.StatusForwarding {
			t.Errorf("status of a buffered id = %v, %v; want Forwarding", st, err)
		}
		if _, err := e.site.Status(sendCtx(t), []string{uuid.NewString()}); !errors.Is(err, ports.ErrUnavailable) {
			t.Errorf("status of an unbuffered id with central down: %v, want ErrUnavailable", err)
		}
		e.central.down.Store(false)
		waittest.For(t, time.Minute, "an empty buffer", drained(e.buf))
		for _, id := range ids {
			if !e.central.stored(t, id) {
				t.Fatalf("%s never reached central", id)
			}
		}
		st, err = e.site.Status(sendCtx(t), ids[:1])
		if err != nil || st[ids[0]] != ports.StatusPending {
			t.Errorf("status after forwarding = %v, %v; want central's Pending", st, err)
		}
	})
}

// TestRejectedNotificationsStayAndDoNotBlock: rows central refuses (here a
// subject over central's limit, the site's being higher) stay in the buffer,
// never dropped nor parked, while the rows behind them go on to central.
func TestRejectedNotificationsStayAndDoNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSiteEnv(t, SiteConfig{ForwardBatch: 2, MaxSubjectBytes: 1000})
		var rejected []string
		for range 3 {
			id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: strings.Repeat("s", 300)})
			if err != nil {
				t.Fatal(err)
			}
			rejected = append(rejected, id)
		}
		var good []string
		for range 5 {
			id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "fine"})
			if err != nil {
				t.Fatal(err)
			}
			good = append(good, id)
		}
		e.forward(t)
		waittest.For(t, time.Minute, "the good rows at central", func() (bool, string) {
			for _, id := range good {
				if !e.central.stored(t, id) {
					return false, id + " is not at central"
				}
			}
			return true, ""
		})
		after := e.central.submits.Load()
		waittest.For(t, time.Minute, "the rejected rows offered again", func() (bool, string) {
			n := e.central.submits.Load()
			return n >= after+2, fmt.Sprintf("%d submits since the good rows arrived", n-after)
		})
		st, err := e.buf.Stats(context.Background())
		if err != nil || st.Count != 3 {
			t.Fatalf("buffer holds %d, %v; want the 3 rejected rows", st.Count, err)
		}
		got, err := e.site.Status(sendCtx(t), rejected)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range rejected {
			if got[id] != ports.StatusForwarding || e.central.stored(t, id) {
				t.Errorf("rejected %s: status %s, stored %v", id, got[id], e.central.stored(t, id))
			}
		}
	})
}

func TestStatusAnswersUnknownAndRefusesBadIDs(t *testing.T) {
	e := newSiteEnv(t, SiteConfig{MaxStatusIDs: 2})
	unknown := uuid.NewString()
	st, err := e.site.Status(sendCtx(t), []string{unknown})
	if err != nil || st[unknown] != ports.StatusUnknown {
		t.Errorf("status of an id nobody knows = %v, %v; want Unknown", st, err)
	}
	if _, err := e.site.Status(sendCtx(t), []string{"nope"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("bad id: %v, want ErrInvalid", err)
	}
	if _, err := e.site.Status(sendCtx(t), []string{unknown, unknown, unknown}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("too many ids: %v, want ErrInvalid", err)
	}
}

func TestSiteConfigValidate(t *testing.T) {
	err := SiteConfig{ForwardBatch: -1, RetryInterval: -time.Second}.Validate()
	for _, want := range []string{"Site: required", "ForwardBatch: must be positive", "RetryInterval: must be positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to say %q", err, want)
		}
	}
	if _, err := NewSite(SiteConfig{Site: "s"}, SiteDeps{}); err == nil || !strings.Contains(err.Error(), "Buffer is nil") {
		t.Errorf("NewSite without deps = %v", err)
	}
}

// TestForwarderShrinksBatchesCentralRefuses: a central taking at most 4 rows
// a Submit still gets everything from a site configured for 50.
func TestForwarderShrinksBatchesCentralRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSiteEnv(t, SiteConfig{ForwardBatch: 50})
		e.central = newFlakyCentralWith(t, "plant-1", Config{MaxBatch: 4})
		s, err := NewSite(e.site.cfg, SiteDeps{Buffer: e.buf, Central: e.central})
		if err != nil {
			t.Fatal(err)
		}
		e.site = s
		var ids []string
		for range 30 {
			id, err := e.site.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		e.forward(t)
		waittest.For(t, time.Minute, "an empty buffer", drained(e.buf))
		for _, id := range ids {
			if !e.central.stored(t, id) {
				t.Fatalf("%s never reached central", id)
			}
		}
	})
}

// TestForwarderWaitsAsCentralAsks: a central that refuses batches for now
// (the site over its ingest quota) gets the same batch again after the wait
// it asked for, not after RetryInterval; nothing is lost, and the refusals
// are neither errors nor warnings in the site's log (one info line for the
// run of them).
func TestForwarderWaitsAsCentralAsks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), &slog.HandlerOptions{Level: slog.LevelDebug}))
		buf := membuffer.New("a")
		central := newFlakyCentral(t, "plant-1")
		central.throttle.Store(20)
		central.throttleAfter = 5 * time.Millisecond
		// A retry interval no test waits for: only honouring central's hint
		// gets the rows through in time.
		s, err := NewSite(SiteConfig{Site: "plant-1", RetryInterval: time.Hour}, SiteDeps{Buffer: buf, Central: central, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 10 {
			id, err := s.Send(sendCtx(t), ports.SendRequest{List: "ops", Subject: "s"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		e := &siteEnv{site: s, buf: buf, central: central}
		start := time.Now()
		e.forward(t)
		waittest.For(t, time.Minute, "an empty buffer", drained(buf))
		// The bubble's clock: 20 waits of 5 ms and the linger, nothing else.
		if took := time.Since(start); took > time.Second {
			t.Errorf("the buffer took %s to drain; central asked for 20 waits of 5 ms", took)
		}
		for _, id := range ids {
			if !central.stored(t, id) {
				t.Fatalf("%s never reached central", id)
			}
		}
		if n := central.submits.Load(); n < 21 {
			t.Errorf("%d Submits, want the 20 refused ones and one more", n)
		}
		mu.Lock()
		log := logs.String()
		mu.Unlock()
		if strings.Contains(log, "level=ERROR") || strings.Contains(log, "level=WARN") {
			t.Errorf("central's requests to slow down were logged as failures:\n%s", log)
		}
		if n := strings.Count(log, "asks this site to slow down"); n != 1 {
			t.Errorf("%d lines about slowing down for 20 refusals, want 1:\n%s", n, log)
		}
	})
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// scanUntilDone is a buffer whose Scan waits for its context to end and
// returns its error, as a Raft buffer's read does when the node stops.
type scanUntilDone struct {
	*membuffer.Buffer
	scanning chan struct{}
}

func (b *scanUntilDone) Scan(ctx context.Context, after uint64, limit int) ([]ports.Buffered, error) {
	close(b.scanning)
	<-ctx.Done()
	return nil, fmt.Errorf("scan: %w", ctx.Err())
}

// TestForwarderStopsQuietlyMidRead: a forwarder stopped while it reads the
// buffer stops without logging the read cut short as an error.
func TestForwarderStopsQuietlyMidRead(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	buf := &scanUntilDone{Buffer: membuffer.New("a"), scanning: make(chan struct{})}
	s, err := NewSite(SiteConfig{Site: "plant-1", RetryInterval: time.Millisecond},
		SiteDeps{Buffer: buf, Central: newFlakyCentral(t, "plant-1"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Forward(ctx) }()
	<-buf.scanning
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logged.String(), "level=ERROR") {
		t.Errorf("a stop mid-read logged an error:\n%s", logged.String())
	}
}
