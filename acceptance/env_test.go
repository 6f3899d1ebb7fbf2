package acceptance

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// t0 is where the manual clock of these tests starts.
var t0 = time.Date(2026, time.March, 2, 8, 0, 0, 0, time.UTC)

// Lists of the test directory: "ops" is delivered by the scripted email
// channel; "hooks" is of a type no channel serves.
var testLists = []ports.List{
	{Name: "ops", Type: "email", Targets: []string{"ops@example.com", "oncall@example.com"}},
	{Name: "hooks", Type: "webhook", Targets: []string{"https://hooks.example.com/x"}},
}

// maxRetries is the email channel's retry limit in these tests.
const maxRetries = 3

var testChannels = []ports.ChannelSettings{{
	Type:  "email",
	Retry: ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: maxRetries, Interval: time.Minute},
}}

// env is one central outbox over a real store with a scripted channel and a
// manual clock.
type env struct {
	t     *testing.T
	svc   *core.Service
	ch    *ScriptedChannel
	clock *Clock
	store *sqlstore.DB
	cfg   sqlstore.Config
	// channels defaults to the scripted channel serving "email".
	channels ports.ChannelRegistry
	// settings default to testChannels.
	settings []ports.ChannelSettings
}

// newEnv builds an outbox on a fresh database of backend b.
func newEnv(t *testing.T, b backend, cfg core.Config) *env {
	t.Helper()
	sc := b.config(t)
	e := &env{t: t, ch: NewScriptedChannel(Succeed), clock: NewClock(t0), cfg: sc}
	e.store = open(t, sc)
	e.svc = e.service(e.store, cfg)
	return e
}

// service builds another Service over store sharing e's channel and clock.
func (e *env) service(store *sqlstore.DB, cfg core.Config) *core.Service {
	e.t.Helper()
	settings := e.settings
	if settings == nil {
		settings = testChannels
	}
	dir, err := memdir.New(testLists, settings)
	if err != nil {
		e.t.Fatal(err)
	}
	var clock ports.Clock = ports.SystemClock{}
	if e.clock != nil {
		clock = e.clock
	}
	svc, err := core.New(cfg, core.Deps{
		Store: store.Notifications(), Audit: store.Notifications(), Directory: dir, Clock: clock,
		Channels: e.registry(),
		Logger:   testLogger(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

func (e *env) registry() ports.ChannelRegistry {
	if e.channels != nil {
		return e.channels
	}
	return ports.ChannelMap{"email": e.ch}
}

// run runs svc until the returned stop is called (or the test ends); stop
// waits for Run to return.
func (e *env) run(svc *core.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				e.t.Errorf("Run did not return within a minute of its cancellation")
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// await waits for the channel to report an attempt on id.
func await(t *testing.T, attempted <-chan string, id string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case got := <-attempted:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("no delivery attempt of %s within a minute", id)
		}
	}
}

func testLogger() *slog.Logger {
	level := slog.LevelError + 1 // silent unless asked
	if os.Getenv("OUTBOX_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// submission returns a valid submission to list from site-a.
func submission(list string) ports.Submission {
	return ports.Submission{
		ID: uuid.Must(uuid.NewV7()).String(), List: list, Subject: "Tank 3 level high", Body: "Level 93% at 08:00.",
		SourceSite: "site-a", SourceInstance: "tank-3", SourceScript: "alarms/level",
		ExecutionID: "exec-1", SiteEnqueuedAt: t0.Add(-time.Second),
	}
}

// submit ingests subs and fails the test unless every one is accepted.
func (e *env) submit(subs ...ports.Submission) []string {
	e.t.Helper()
	res, err := e.svc.Submit(context.Background(), ports.SubmitRequest{Notifications: subs})
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	if len(res.Rejected) > 0 || len(res.Accepted) != len(subs) {
		e.t.Fatalf("submit: accepted %d of %d, rejected %+v", len(res.Accepted), len(subs), res.Rejected)
	}
	return res.Accepted
}

// send submits one notification to list and returns its id.
func (e *env) send(list string) string { return e.submit(submission(list))[0] }

// dispatch runs one dispatch cycle and returns how many rows it handled.
func (e *env) dispatch() int {
	e.t.Helper()
	n, err := e.svc.DispatchOnce(context.Background())
	if err != nil {
		e.t.Fatalf("dispatch: %v", err)
	}
	return n
}

// get returns the detail of id.
func (e *env) get(id string) ports.Detail {
	e.t.Helper()
	d, err := e.svc.Notification(context.Background(), id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return d
}

// status asserts id's status and returns its detail.
func (e *env) status(id string, want ports.Status) ports.Detail {
	e.t.Helper()
	d := e.get(id)
	if d.Status != want {
		e.t.Fatalf("notification %s is %s (last error %q), want %s", id, d.Status, d.LastError, want)
	}
	return d
}

// kinds lists the kinds of a history.
func kinds(h []ports.AuditRecord) []ports.AuditKind {
	out := make([]ports.AuditKind, len(h))
	for i, r := range h {
		out[i] = r.Kind
	}
	return out
}

// refusedWith asserts that res refused exactly id with an error wrapping want
// whose text contains text.
func refusedWith(t *testing.T, res ports.ActionResult, id string, want error, text string) {
	t.Helper()
	if len(res.Moved) != 0 || len(res.Refused) != 1 || res.Refused[0].ID != id {
		t.Fatalf("want %s refused and nothing moved, got %+v", id, res)
	}
	err := res.Refused[0].Err
	if !errors.Is(err, want) {
		t.Fatalf("refusal %v does not wrap %v", err, want)
	}
	if text != "" && !containsFold(err.Error(), text) {
		t.Fatalf("refusal %q does not say %q", err, text)
	}
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
