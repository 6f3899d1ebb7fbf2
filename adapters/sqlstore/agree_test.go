package sqlstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// PostgreSQL reads a filter's rows in one of several ways (keysUse: the
// notifications alone, joined with their keys, the keys alone, one status
// at a time), where SQLite always reads the notifications alone. These
// tests hold PostgreSQL's answers to SQLite's over many combinations of a
// filter's fields, on rows whose creation times tie in threes, paged four
// rows at a time in either order.

// agreeRows returns 90 rows of random statuses, types, lists, sites and
// subjects, three created at each second.
func agreeRows() []ports.Notification {
	r := rand.New(rand.NewPCG(1, 2))
	ns := make([]ports.Notification, 90)
	for i := range ns {
		created := storetest.BaseTime.Add(time.Duration(i/3) * time.Second)
		n := storetest.NewNotification(created)
		n.ID = strings.ToLower(n.ID)
		n.Status = ports.CentralStatuses[r.IntN(len(ports.CentralStatuses))]
		n.Type = []string{"email", "webhook", "slack"}[r.IntN(3)]
		n.List = []string{"list-1", "list-2", ""}[r.IntN(3)]
		n.SourceSite = []string{"site-1", "site-2", "site-3"}[r.IntN(3)]
		n.Subject = []string{"Pump flooded", "Tank LEVEL high", "Valve stopped", "pump FLOODED again", "x"}[r.IntN(5)]
		n.UpdatedAt = created.Add(time.Duration(r.IntN(60)) * time.Second)
		if n.Status == ports.StatusDelivered {
			n.DeliveredAt = n.UpdatedAt
		}
		ns[i] = n
	}
	return ns
}

// agreeFilters returns every combination of a few values of each field of
// a filter, shuffled.
func agreeFilters() []ports.Filter {
	t0 := storetest.BaseTime
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var out []ports.Filter
	for _, st := range [][]ports.Status{nil, {ports.StatusParked}, {ports.StatusPending, ports.StatusParked},
		{ports.StatusDelivered, ports.StatusRetrying, ports.StatusPending}} {
		for _, typ := range []string{"", "email"} {
			for _, site := range []string{"", "site-1"} {
				for _, list := range []string{"", "list-2"} {
					for _, created := range [][2]time.Time{{}, {at(5), {}}, {{}, at(20)}, {at(3), at(25)}} {
						for _, updated := range [][2]time.Time{{}, {at(15), {}}, {{}, at(40)}} {
							for _, stuck := range []time.Time{{}, at(18)} {
								for _, subject := range []string{"", "flood", "zzz"} {
									out = append(out, ports.Filter{Statuses: st, Type: typ, SourceSite: site, List: list,
										CreatedFrom: created[0], CreatedTo: created[1], UpdatedFrom: updated[0], UpdatedTo: updated[1],
										StuckBefore: stuck, Subject: subject})
								}
							}
						}
					}
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// pageAll returns the ids of f's rows, read limit at a time.
func pageAll(s ports.Store, f ports.Filter, oldest bool, limit int) ([]string, error) {
	var ids []string
	after := ""
	for range 200 {
		p, err := s.Query(context.Background(), f, ports.PageRequest{Limit: limit, After: after, Oldest: oldest})
		if err != nil {
			return nil, err
		}
		for _, n := range p.Items {
			ids = append(ids, strings.ToLower(n.ID))
		}
		if p.Next == "" {
			return ids, nil
		}
		after = p.Next
	}
	return ids, fmt.Errorf("more than 200 pages")
}

// TestPostgresListsAgreeWithSQLite: 300 filters (of 2,304), each paged
// newest and oldest first, counted, and counted per status (exact and
// capped), give the same answers on PostgreSQL as on SQLite; then 120 bulk
// transitions by filter move the same rows on both, and the keys stay in
// step.
func TestPostgresListsAgreeWithSQLite(t *testing.T) {
	ctx := context.Background()
	pg, lite := newPostgresStore(t, postgresDSN(t)), newSQLiteStore(t)
	rows := agreeRows()
	for _, s := range []*DB{pg, lite} {
		if _, err := s.Notifications().Insert(ctx, slices.Clone(rows)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pg.writer().ExecContext(ctx, "ANALYZE notifications, notification_keys"); err != nil {
		t.Fatal(err)
	}
	filters := agreeFilters()[:300]
	for _, f := range filters {
		for _, oldest := range []bool{false, true} {
			a, errA := pageAll(pg.Notifications(), f, oldest, 4)
			b, errB := pageAll(lite.Notifications(), f, oldest, 4)
			if errA != nil || errB != nil || !slices.Equal(a, b) {
				t.Errorf("Query %+v, oldest first %v: PostgreSQL %v %v, SQLite %v %v", f, oldest, a, errA, b, errB)
			}
		}
		a, errA := pg.Notifications().Count(ctx, f)
		b, errB := lite.Notifications().Count(ctx, f)
		if errA != nil || errB != nil || a != b {
			t.Errorf("Count %+v: PostgreSQL %d %v, SQLite %d %v", f, a, errA, b, errB)
		}
		for _, limit := range []int64{0, 2} {
			a, errA := pg.Notifications().CountByStatus(ctx, f, limit)
			b, errB := lite.Notifications().CountByStatus(ctx, f, limit)
			if errA != nil || errB != nil || !maps.Equal(a, b) {
				t.Errorf("CountByStatus %+v, limit %d: PostgreSQL %v %v, SQLite %v %v", f, limit, a, errA, b, errB)
			}
		}
	}

	now := storetest.BaseTime.Add(time.Hour)
	moved := func(ms []ports.Moved) []string {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = strings.ToLower(m.ID)
		}
		return slices.Sorted(slices.Values(ids))
	}
	for i, f := range filters[:120] {
		req := ports.TransitionRequest{Selection: ports.Selection{Filter: f}, From: ports.CentralStatuses[i%5],
			To: ports.CentralStatuses[(i+1)%5], Now: now.Add(time.Duration(i) * time.Second)}
		a, errA := pg.Notifications().Transition(ctx, req)
		b, errB := lite.Notifications().Transition(ctx, req)
		if errA != nil || errB != nil || !slices.Equal(moved(a), moved(b)) {
			t.Errorf("Transition %+v %s to %s: PostgreSQL %v %v, SQLite %v %v", f, req.From, req.To, moved(a), errA, moved(b), errB)
		}
	}
	keysInStep(t, pg, len(rows))
}
