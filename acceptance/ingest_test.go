package acceptance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

func TestIngest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()

		t.Run("RepeatedSubmitIsHarmless", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			s := submission("ops")
			first := e.submit(s)
			changed := s
			changed.Subject = "a different subject on the second try"
			second := e.submit(changed, s) // a resend, and a duplicate inside one batch
			if !slices.Equal(first, []string{s.ID}) || !slices.Equal(second, []string{s.ID, s.ID}) {
				t.Fatalf("accepted %v then %v", first, second)
			}
			d := e.status(s.ID, ports.StatusPending)
			if d.Subject != s.Subject {
				t.Errorf("a resend overwrote the row: subject %q", d.Subject)
			}
			if got := kinds(d.History); !slices.Equal(got, []ports.AuditKind{ports.AuditIngested}) {
				t.Errorf("history %v, want one Ingested record", got)
			}
			if d.Type != "email" || d.SourceSite != "site-a" || d.SourceScript != "alarms/level" || !d.CreatedAt.Equal(t0) ||
				!d.SiteEnqueuedAt.Equal(t0.Add(-1e9)) {
				t.Errorf("ingested row lost fields: %+v", d.Notification)
			}
		})

		t.Run("InvalidSubmissionsRejectedOneByOne", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			good := submission("ops")
			bad := map[string]func(*ports.Submission){
				"is not a UUID":                       func(s *ports.Submission) { s.ID = "not-a-uuid" },
				"list is empty":                       func(s *ports.Submission) { s.List = " " },
				"subject is 256 bytes":                func(s *ports.Submission) { s.Subject = strings.Repeat("x", 256) },
				"body is not valid UTF-8":             func(s *ports.Submission) { s.Body = "bad \xff byte" },
				"source site is empty":                func(s *ports.Submission) { s.SourceSite = "" },
				"type data is not valid JSO":          func(s *ports.Submission) { s.TypeData = []byte("{") },
				"subject holds a NUL byte":            func(s *ports.Submission) { s.Subject = "a\x00b" },
				"priority 101 is outside -100 to 100": func(s *ports.Submission) { s.Priority = ports.MaxPriority + 1 },
				"expires at is outside":               func(s *ports.Submission) { s.ExpiresAt = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC) },
			}
			subs := []ports.Submission{good}
			for _, mutate := range bad {
				s := submission("ops")
				mutate(&s)
				subs = append(subs, s)
			}
			res, err := e.svc.Submit(ctx, ports.SubmitRequest{Notifications: subs})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Accepted, []string{good.ID}) || len(res.Rejected) != len(bad) {
				t.Fatalf("accepted %v, rejected %d: %+v", res.Accepted, len(res.Rejected), res.Rejected)
			}
			for want := range bad {
				found := false
				for _, r := range res.Rejected {
					found = found || strings.Contains(r.Reason, want)
				}
				if !found {
					t.Errorf("no rejection says %q: %+v", want, res.Rejected)
				}
			}
			for _, s := range subs[1:] {
				if st, _ := e.svc.Status(ctx, ports.StatusRequest{IDs: []string{s.ID}}); st[s.ID] != ports.StatusUnknown {
					t.Errorf("rejected submission %q was stored as %s", s.ID, st[s.ID])
				}
			}
		})

		t.Run("SiteCannotSubmitForAnother", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			own, forged := submission("ops"), submission("ops")
			forged.SourceSite = "site-b"
			res, err := e.svc.Submit(ctx, ports.SubmitRequest{Site: "site-a", Notifications: []ports.Submission{own, forged}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Accepted, []string{own.ID}) || len(res.Rejected) != 1 ||
				!strings.Contains(res.Rejected[0].Reason, `source site "site-b" is not the calling site "site-a"`) {
				t.Fatalf("forged submission: %+v", res)
			}
			if h := e.get(own.ID).History; h[0].Actor != "site:site-a" {
				t.Errorf("ingest actor %q, want site:site-a", h[0].Actor)
			}
		})

		t.Run("OversizeBatchRefused", func(t *testing.T) {
			e := newEnv(t, b, core.Config{MaxBatch: 2})
			_, err := e.svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{submission("ops"), submission("ops"), submission("ops")}})
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("oversize batch: %v, want ErrInvalid", err)
			}
		})

		t.Run("StoreErrorAcceptsNothing", func(t *testing.T) {
			e := newEnv(t, b, core.Config{})
			kept := e.send("ops")
			if err := e.store.Close(); err != nil {
				t.Fatal(err)
			}
			res, err := e.svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{submission("ops")}})
			if err == nil || len(res.Accepted) != 0 {
				t.Fatalf("submit to a closed store: %+v, %v; want an error and nothing accepted", res, err)
			}
			reopened := e.service(open(t, e.cfg), core.Config{})
			if st, err := reopened.Status(ctx, ports.StatusRequest{IDs: []string{kept}}); err != nil || st[kept] != ports.StatusPending {
				t.Fatalf("a row accepted before the failure is gone: %v, %v", st, err)
			}
		})
	})
}
