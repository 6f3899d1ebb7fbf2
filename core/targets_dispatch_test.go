package core

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// targetChannel answers each target on its own: a target's scripted
// outcomes in order, then Success. It counts what each target received.
type targetChannel struct {
	mu       sync.Mutex
	script   map[string][]ports.Outcome
	received map[string]int // deliveries that reached the target
	asked    map[string]int // attempts that went to the target
}

func newTargetChannel(script map[string][]ports.Outcome) *targetChannel {
	return &targetChannel{script: script, received: map[string]int{}, asked: map[string]int{}}
}

func (c *targetChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := ports.Result{Outcome: ports.OutcomeTransient, Targets: make([]ports.TargetResult, len(d.Targets))}
	for i, t := range d.Targets {
		c.asked[t]++
		o := ports.OutcomeSuccess
		if s := c.script[t]; len(s) > 0 {
			o, c.script[t] = s[0], s[1:]
		}
		res.Targets[i] = ports.TargetResult{Outcome: o}
		switch o {
		case ports.OutcomeSuccess:
			c.received[t]++
		case ports.OutcomePermanent:
			res.Targets[i].Error = "550 5.1.1 mailbox unavailable"
		default:
			res.Targets[i].Error = "503 busy"
		}
	}
	return res
}

// listDirectory holds one list, which a test may change.
type listDirectory struct {
	mu      sync.Mutex
	targets []string
}

func (d *listDirectory) List(_ context.Context, name string) (ports.List, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return ports.List{Name: name, Type: "email", Targets: slices.Clone(d.targets)}, nil
}

func (d *listDirectory) ChannelSettings(context.Context, string) (ports.ChannelSettings, error) {
	return ports.ChannelSettings{Retry: ports.RetrySettings{MaxRetries: 5, Interval: time.Minute}}, nil
}

func (d *listDirectory) set(targets ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.targets = targets
}

type targetEnv struct {
	t     *testing.T
	svc   *Service
	store *memstore.Store
	clock *stepClock
	dir   *listDirectory
	ch    *targetChannel
}

func newTargetEnv(t *testing.T, targets []string, script map[string][]ports.Outcome) *targetEnv {
	t.Helper()
	e := &targetEnv{t: t, store: memstore.New(), clock: &stepClock{now: tAt}, dir: &listDirectory{targets: targets},
		ch: newTargetChannel(script)}
	svc, err := New(Config{}, Deps{Store: e.store, Audit: e.store, Channels: ports.ChannelMap{"email": e.ch},
		Directory: e.dir, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

func (e *targetEnv) send() string {
	e.t.Helper()
	res, err := e.svc.Submit(e.t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{{
		ID: uuid.NewString(), List: "ops", SourceSite: "site-a", Subject: "pump 3 tripped"}}})
	if err != nil || len(res.Accepted) != 1 {
		e.t.Fatalf("submit: %+v, %v", res, err)
	}
	return res.Accepted[0]
}

func (e *targetEnv) dispatch() {
	e.t.Helper()
	if _, err := e.svc.DispatchOnce(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *targetEnv) row(id string, want ports.Status) ports.Detail {
	e.t.Helper()
	d, err := e.svc.Notification(e.t.Context(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	if d.Status != want {
		e.t.Fatalf("status %s (%s), want %s", d.Status, d.LastError, want)
	}
	return d
}

// TestNoTargetReceivesTwice: a list of three where one receiver answers 503
// twice, then 200: each receiver gets exactly one delivery, the busy one is
// asked three times, and the row is Delivered after the third attempt, with
// a history that names the targets of each attempt.
func TestNoTargetReceivesTwice(t *testing.T) {
	hooks := []string{"https://a.example/hook", "env:HOOK_B", "https://c.example/hook"}
	e := newTargetEnv(t, hooks, map[string][]ports.Outcome{
		"env:HOOK_B": {ports.OutcomeTransient, ports.OutcomeTransient}})
	id := e.send()
	e.dispatch()
	if d := e.row(id, ports.StatusRetrying); statuses(d.Targets) != "https://a.example/hook=Delivered env:HOOK_B=Retrying https://c.example/hook=Delivered" {
		t.Fatalf("after the first attempt: %s", statuses(d.Targets))
	}
	for range 2 {
		e.clock.advance(time.Minute)
		e.dispatch()
	}
	d := e.row(id, ports.StatusDelivered)
	for _, h := range hooks {
		if e.ch.received[h] != 1 {
			t.Errorf("%s received %d deliveries, want exactly 1", h, e.ch.received[h])
		}
	}
	if e.ch.asked["env:HOOK_B"] != 3 || e.ch.asked["https://a.example/hook"] != 1 {
		t.Errorf("attempts per target %v", e.ch.asked)
	}
	if !slices.Equal(d.ResolvedTargets, hooks) || d.RetryCount != 2 {
		t.Errorf("resolved %q, RetryCount %d", d.ResolvedTargets, d.RetryCount)
	}
	var went [][]string
	for _, r := range d.History {
		if r.Kind == ports.AuditAttempted {
			var ts []string
			for _, at := range r.Targets {
				ts = append(ts, at.Target+":"+string(at.Outcome))
			}
			went = append(went, ts)
		}
	}
	want := [][]string{
		{"https://a.example/hook:Success", "env:HOOK_B:Transient", "https://c.example/hook:Success"},
		{"env:HOOK_B:Transient"}, {"env:HOOK_B:Success"},
	}
	if !slices.EqualFunc(went, want, slices.Equal) {
		t.Errorf("attempts went to %q, want %q", went, want)
	}
}

// TestRetryGoesOnlyToTheFailed: one address of five refused for good parks
// the row with the four delivered; the operator corrects the list and
// retries, and only the corrected address gets the notification.
func TestRetryGoesOnlyToTheFailed(t *testing.T) {
	list := []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com", "typo@exmaple.com"}
	e := newTargetEnv(t, list, map[string][]ports.Outcome{"typo@exmaple.com": {ports.OutcomePermanent}})
	id := e.send()
	e.dispatch()
	d := e.row(id, ports.StatusParked)
	if d.LastError != "1 of 5 targets not delivered: 550 5.1.1 mailbox unavailable" || len(d.ResolvedTargets) != 4 {
		t.Fatalf("parked: LastError %q, resolved %q", d.LastError, d.ResolvedTargets)
	}
	if strings.Contains(d.LastError, "@") {
		t.Errorf("LastError names an address: %q", d.LastError)
	}
	e.dir.set(append(list[:4:4], "typo@example.com")...)
	if _, err := e.svc.Retry(t.Context(), ports.Action{Actor: "ann", IDs: []string{id}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch()
	d = e.row(id, ports.StatusDelivered)
	for _, a := range list[:4] {
		if e.ch.received[a] != 1 {
			t.Errorf("%s received %d, want 1", a, e.ch.received[a])
		}
	}
	if e.ch.received["typo@example.com"] != 1 || e.ch.asked["typo@exmaple.com"] != 1 {
		t.Errorf("received %v, asked %v", e.ch.received, e.ch.asked)
	}
	if got := statuses(d.Targets); !strings.HasSuffix(got, "typo@exmaple.com=Dropped typo@example.com=Delivered") {
		t.Errorf("targets %s", got)
	}
}
