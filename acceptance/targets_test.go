package acceptance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// targetOutbox is an outbox on the real clock delivering through plugins,
// whose directory a test may change as an operator would.
type targetOutbox struct {
	t   *testing.T
	svc *core.Service
	dir *memdir.Directory
}

func newTargetOutbox(t *testing.T, b backend, channels ports.ChannelRegistry, list ports.List, settings ports.ChannelSettings) *targetOutbox {
	t.Helper()
	store := open(t, b.config(t))
	dir, err := memdir.New([]ports.List{list}, []ports.ChannelSettings{settings})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{DispatchInterval: 50 * time.Millisecond, DeliveryTimeout: 10 * time.Second},
		core.Deps{Store: store.Notifications(), Audit: store.Notifications(), Directory: dir, Channels: channels, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	(&env{t: t}).run(svc)
	return &targetOutbox{t: t, svc: svc, dir: dir}
}

func (o *targetOutbox) send(list string) string {
	o.t.Helper()
	res, err := o.svc.Submit(context.Background(), ports.SubmitRequest{Notifications: []ports.Submission{submission(list)}})
	if err != nil || len(res.Accepted) != 1 {
		o.t.Fatalf("submit: %v, %+v", err, res.Rejected)
	}
	return res.Accepted[0]
}

// await waits until the notification is in status s and returns it.
func (o *targetOutbox) await(id string, s ports.Status) ports.Detail {
	o.t.Helper()
	var d ports.Detail
	waittest.For(o.t, 2*time.Minute, "notification "+string(s), waittest.Holds(func() bool {
		var err error
		d, err = o.svc.Notification(context.Background(), id)
		return err == nil && d.Status == s && settledInHistory(d)
	}))
	return d
}

// settledInHistory says whether a row's history already holds the record of
// the status it shows. The dispatcher appends a batch's audit records after
// recording its outcomes, so for a moment a row can read Delivered or
// Parked before the attempt that got it there is in its history. The
// settling record is the Delivered or Parked one, or the Attempted one
// alone of an attempt that delivered the row with no error to tell.
func settledInHistory(d ports.Detail) bool {
	if d.Status != ports.StatusDelivered && d.Status != ports.StatusParked {
		return true
	}
	if len(d.History) == 0 {
		return false
	}
	last := d.History[len(d.History)-1]
	switch last.Kind {
	case ports.AuditDelivered, ports.AuditParked:
		return last.Status == d.Status
	case ports.AuditAttempted:
		return d.Status == ports.StatusDelivered && last.Status == d.Status && last.Outcome == ports.OutcomeSuccess
	}
	return false
}

// targetStatuses is "target=Status ..." of a row's targets.
func targetStatuses(d ports.Detail) string {
	var parts []string
	for _, t := range d.Targets {
		parts = append(parts, t.Target+"="+string(t.Status))
	}
	return strings.Join(parts, " ")
}

// TestOneRefusedRecipientOfFive: a real SMTP server refuses one recipient
// of five with 550. The four get exactly one message each, the row parks
// with that address shown failed (and no address in its error); the
// operator corrects the list and retries, and only the corrected address
// gets the notification.
func TestOneRefusedRecipientOfFive(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		srv, err := smtpcapture.Start(smtpcapture.Config{Reject: []string{"typo@exmaple.com"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		host, port, _ := strings.Cut(srv.Addr(), ":")
		good := []string{"ann@example.com", "bob@example.com", "cy@example.com", "di@example.com"}
		list := ports.List{Name: "shift", Type: "email", Targets: append(good[:4:4], "typo@exmaple.com")}
		o := newTargetOutbox(t, b, startPlugins(t, "email"), list, ports.ChannelSettings{Type: "email",
			Settings: map[string]string{"host": host, "port": port, "tls": "none", "from": "outbox@example.com"}})

		id := o.send("shift")
		d := o.await(id, ports.StatusParked)
		want := "ann@example.com=Delivered bob@example.com=Delivered cy@example.com=Delivered di@example.com=Delivered typo@exmaple.com=Failed"
		if got := targetStatuses(d); got != want {
			t.Fatalf("targets %s, want %s", got, want)
		}
		if failed := d.Targets[4]; !strings.Contains(failed.LastError, "550") || strings.Contains(failed.LastError, "@") {
			t.Errorf("the refused target's error %q: want the server's 550, and no address", failed.LastError)
		}
		if !strings.Contains(d.LastError, "1 of 5 targets not delivered") || strings.Contains(d.LastError, "@") {
			t.Errorf("LastError %q", d.LastError)
		}
		received := func() map[string]int {
			n := map[string]int{}
			for _, m := range srv.Messages() {
				for _, to := range m.To {
					n[strings.ToLower(to)]++
				}
			}
			return n
		}
		for _, a := range good {
			if n := received()[a]; n != 1 {
				t.Errorf("%s received %d messages, want 1", a, n)
			}
		}

		list.Targets[4] = "di.backup@example.com"
		if err := o.dir.PutList(context.Background(), list); err != nil {
			t.Fatal(err)
		}
		if res, err := o.svc.Retry(context.Background(), ports.Action{Actor: "ann", IDs: []string{id}}); err != nil || len(res.Moved) != 1 {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		d = o.await(id, ports.StatusDelivered)
		got := received()
		for _, a := range append(good, "di.backup@example.com") {
			if got[a] != 1 {
				t.Errorf("after the retry %s received %d messages, want 1", a, got[a])
			}
		}
		if len(srv.Messages()) != 2 {
			t.Errorf("%d messages in all, want 2 (one to the four, one to the corrected address)", len(srv.Messages()))
		}
		if s := targetStatuses(d); !strings.HasSuffix(s, "typo@exmaple.com=Dropped di.backup@example.com=Delivered") {
			t.Errorf("targets after the retry: %s", s)
		}
	})
}

// TestWebhookReceiverBusyTwice: of three real HTTP receivers, one answers
// 503 twice, then 200. The two healthy ones get exactly one post each, the
// busy one three (one accepted), and the row ends Delivered after the third
// attempt, each attempt's targets in its history.
func TestWebhookReceiverBusyTwice(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		var mu sync.Mutex
		posts := map[string]int{}
		receiver := func(name string, busy int) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				posts[name]++
				n := posts[name]
				mu.Unlock()
				if n <= busy {
					http.Error(w, "busy", http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(srv.Close)
			return srv.URL + "/hook"
		}
		hooks := []string{receiver("a", 0), receiver("busy", 2), receiver("c", 0)}
		o := newTargetOutbox(t, b, startPlugins(t, "webhook"),
			ports.List{Name: "hooks", Type: "webhook", Targets: hooks},
			ports.ChannelSettings{Type: "webhook",
				Retry: ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: 10, Interval: 50 * time.Millisecond}})

		id := o.send("hooks")
		d := o.await(id, ports.StatusDelivered)
		mu.Lock()
		defer mu.Unlock()
		if posts["a"] != 1 || posts["c"] != 1 || posts["busy"] != 3 {
			t.Errorf("posts per receiver %v, want a:1 busy:3 c:1", posts)
		}
		attempts := 0
		for _, r := range d.History {
			if r.Kind == ports.AuditAttempted {
				attempts++
				if attempts > 1 && (len(r.Targets) != 1 || r.Targets[0].Target != hooks[1]) {
					t.Errorf("attempt %d went to %+v, want the busy receiver alone", attempts, r.Targets)
				}
			}
		}
		if attempts != 3 || d.RetryCount != 2 {
			t.Errorf("%d attempts, RetryCount %d; want 3 and 2", attempts, d.RetryCount)
		}
	})
}
