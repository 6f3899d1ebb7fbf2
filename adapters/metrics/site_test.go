package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// healthSite is a ports.Site whose Health is fixed.
type healthSite struct {
	ports.Site
	h   ports.SiteHealth
	err error
}

func (s healthSite) Health(context.Context) (ports.SiteHealth, error) { return s.h, s.err }

func scrape(t *testing.T, site ports.Site) string {
	t.Helper()
	h, err := Handler(NewSiteCollector(site, slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

func TestSiteCollectorExportsHealth(t *testing.T) {
	contact := time.Unix(1_800_000_000, 0).UTC()
	body := scrape(t, healthSite{h: ports.SiteHealth{
		Site: "plant-1", Node: "a", Backlog: 42, OldestEnqueuedAt: time.Now().Add(-time.Minute),
		Replica:            ports.ReplicaState{Node: "a", Role: ports.RoleLeader, Term: 7, Leader: "a"},
		LastCentralContact: contact, LastCentralError: "central unreachable",
		Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 5, Parked: 2, OldestBufferedAt: time.Now().Add(-2 * time.Minute)},
			{Kind: ports.OpWrite}},
	}})
	for _, want := range []string{
		`outbox_site_backlog{node="a",site="plant-1"} 42`,
		`outbox_site_raft_term{node="a",site="plant-1"} 7`,
		`outbox_site_raft_role{node="a",role="leader",site="plant-1"} 1`,
		`outbox_site_raft_role{node="a",role="follower",site="plant-1"} 0`,
		`outbox_site_last_central_contact_timestamp_seconds{node="a",site="plant-1"} 1.8e+09`,
		`outbox_site_central_error{node="a",site="plant-1"} 1`,
		`outbox_site_health_up 1`,
		`outbox_site_operations_backlog{kind="ExternalCall",node="a",site="plant-1"} 5`,
		`outbox_site_operations_parked{kind="ExternalCall",node="a",site="plant-1"} 2`,
		`outbox_site_operations_backlog{kind="DatabaseWrite",node="a",site="plant-1"} 0`,
		`outbox_site_operations_oldest_buffered_age_seconds{kind="ExternalCall",node="a",site="plant-1"} 12`,
		`outbox_site_operations_oldest_buffered_age_seconds{kind="DatabaseWrite",node="a",site="plant-1"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(body, `outbox_site_oldest_buffered_age_seconds{node="a",site="plant-1"} 6`) {
		t.Errorf("oldest age is not about 60 s:\n%s", grep(body, "oldest"))
	}
}

func TestSiteCollectorReportsAFailedRead(t *testing.T) {
	body := scrape(t, healthSite{err: errors.New("buffer closed")})
	if !strings.Contains(body, "outbox_site_health_up 0") || strings.Contains(body, "outbox_site_backlog{") {
		t.Errorf("a failed health read:\n%s", grep(body, "outbox_"))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
