package memstore_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
	"github.com/siteline/outbox/ports/storetest"
)

func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := memstore.New()
		return storetest.Harness{Store: s, Audit: s}
	})
}

func TestSiteCallContract(t *testing.T) {
	sitecallstest.Exercise(t, func(t *testing.T) ports.SiteCallStore { return memstore.New() })
}

// TestClaimMatchesScan drives the store's claim index through random claims,
// records, releases and transitions, with claim instants that go back and
// forth, and checks every claim against a plain scan of a model of the table.
func TestClaimMatchesScan(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			s := memstore.New()
			model := map[string]ports.Notification{}
			base := storetest.BaseTime
			minute := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

			statuses := []ports.Status{ports.StatusPending, ports.StatusPending, ports.StatusRetrying, ports.StatusRetrying, ports.StatusParked, ports.StatusDelivered}
			var ns []ports.Notification
			for range 200 {
				n := storetest.NewNotification(minute(rng.IntN(20)))
				n.Priority = rng.IntN(3)
				n.Status = statuses[rng.IntN(len(statuses))]
				if n.Status == ports.StatusRetrying && rng.IntN(10) > 0 {
					n.NextAttemptAt = minute(rng.IntN(60))
				}
				ns = append(ns, n)
				model[n.ID] = n
			}
			if _, err := s.Insert(t.Context(), ns); err != nil {
				t.Fatal(err)
			}
			owners := []string{"a", "b", "c"}
			for step := range 400 {
				now := minute(rng.IntN(90))
				switch op := rng.IntN(10); {
				case op < 5:
					req := ports.ClaimRequest{
						Owner: owners[rng.IntN(len(owners))], Now: now,
						Lease: time.Duration(1+rng.IntN(20)) * time.Minute, Limit: 1 + rng.IntN(8),
					}
					got, err := s.Claim(t.Context(), req)
					if err != nil {
						t.Fatal(err)
					}
					want := modelClaim(model, req)
					if !slices.Equal(ids(got), want) {
						t.Fatalf("step %d: claim %+v\n got  %v\n want %v", step, req, ids(got), want)
					}
				case op < 8:
					owner := owners[rng.IntN(len(owners))]
					var us []ports.Update
					for id, n := range model {
						if rng.IntN(4) > 0 || (n.ClaimedBy != owner && rng.IntN(4) > 0) {
							continue
						}
						u := ports.Update{ID: id, Status: statuses[rng.IntN(len(statuses))], UpdatedAt: now, RetryCount: rng.IntN(5)}
						if u.Status == ports.StatusRetrying {
							u.NextAttemptAt = minute(rng.IntN(90))
						}
						us = append(us, u)
					}
					lost, err := s.Record(t.Context(), owner, us)
					if err != nil {
						t.Fatal(err)
					}
					var wantLost []string
					for _, u := range us {
						n := model[u.ID]
						if n.ClaimedBy != owner {
							wantLost = append(wantLost, u.ID)
							continue
						}
						n.Status, n.RetryCount, n.NextAttemptAt, n.UpdatedAt = u.Status, u.RetryCount, u.NextAttemptAt, u.UpdatedAt
						n.LastError, n.ResolvedTargets, n.LastAttemptAt, n.DeliveredAt = "", nil, time.Time{}, time.Time{}
						n.ClaimedBy, n.ClaimedUntil = "", time.Time{}
						model[u.ID] = n
					}
					if !slices.Equal(lost, wantLost) {
						t.Fatalf("step %d: lost %v, want %v", step, lost, wantLost)
					}
				case op < 9:
					owner := owners[rng.IntN(len(owners))]
					var rel []string
					for id, n := range model {
						if rng.IntN(3) == 0 {
							rel = append(rel, id)
							if n.ClaimedBy == owner {
								n.ClaimedBy, n.ClaimedUntil = "", time.Time{}
								model[id] = n
							}
						}
					}
					if err := s.Release(t.Context(), owner, rel); err != nil {
						t.Fatal(err)
					}
				default:
					req := ports.TransitionRequest{
						Selection: ports.Selection{Filter: ports.Filter{SourceSite: "site-1"}},
						From:      statuses[rng.IntN(len(statuses))], To: statuses[rng.IntN(len(statuses))], Now: now, Reset: true,
					}
					rows, err := s.Transition(t.Context(), req)
					if err != nil {
						t.Fatal(err)
					}
					var moved []string
					for _, r := range rows {
						moved = append(moved, r.ID)
					}
					var want []string
					for id, n := range model {
						if n.Status == req.From {
							n.Status, n.UpdatedAt, n.ClaimedBy, n.ClaimedUntil = req.To, now, "", time.Time{}
							n.RetryCount, n.NextAttemptAt, n.LastError = 0, time.Time{}, ""
							model[id] = n
							want = append(want, id)
						}
					}
					slices.Sort(want)
					slices.Sort(moved)
					if !slices.Equal(moved, want) {
						t.Fatalf("step %d: moved %v, want %v", step, moved, want)
					}
				}
			}
			for id, want := range model {
				got, err := s.Get(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if d := storetest.DiffNotification(want, got); len(d) > 0 {
					t.Errorf("row %s: %s", id, strings.Join(d, "; "))
				}
			}
		})
	}
}

// modelClaim is Claim as a scan of the model: it leases and returns the ids.
func modelClaim(model map[string]ports.Notification, req ports.ClaimRequest) []string {
	var cands []ports.Notification
	for _, n := range model {
		due := n.Status == ports.StatusPending ||
			(n.Status == ports.StatusRetrying && !n.NextAttemptAt.After(req.Now))
		free := n.ClaimedUntil.IsZero() || !n.ClaimedUntil.After(req.Now)
		if due && free {
			cands = append(cands, n)
		}
	}
	slices.SortFunc(cands, func(a, b ports.Notification) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	var out []string
	for _, n := range cands[:min(len(cands), req.Limit)] {
		n.ClaimedBy, n.ClaimedUntil = req.Owner, req.Now.Add(req.Lease)
		model[n.ID] = n
		out = append(out, n.ID)
	}
	return out
}

func ids(ns []ports.Notification) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

func TestRecordCopiesTargets(t *testing.T) {
	s := memstore.New()
	n := storetest.NewNotification(storetest.BaseTime)
	if _, err := s.Insert(t.Context(), []ports.Notification{n}); err != nil {
		t.Fatal(err)
	}
	now := storetest.BaseTime.Add(time.Hour)
	if _, err := s.Claim(t.Context(), ports.ClaimRequest{Owner: "a", Now: now, Lease: time.Minute, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	targets := []string{"a@example.test"}
	lost, err := s.Record(t.Context(), "a", []ports.Update{{ID: n.ID, Status: ports.StatusDelivered, ResolvedTargets: targets, DeliveredAt: now, UpdatedAt: now}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("Record: lost %v, err %v", lost, err)
	}
	targets[0] = "mutated"
	got, err := s.Get(t.Context(), n.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResolvedTargets[0] != "a@example.test" {
		t.Errorf("stored targets changed with the caller's slice: %q", got.ResolvedTargets)
	}
}

func TestInvalidInput(t *testing.T) {
	s := memstore.New()
	now := storetest.BaseTime
	checks := map[string]error{}
	_, checks["insert empty id"] = s.Insert(t.Context(), []ports.Notification{{Status: ports.StatusPending}})
	_, checks["claim no owner"] = s.Claim(t.Context(), ports.ClaimRequest{Now: now, Lease: time.Minute, Limit: 1})
	_, checks["claim no limit"] = s.Claim(t.Context(), ports.ClaimRequest{Owner: "a", Now: now, Lease: time.Minute})
	_, checks["claim no lease"] = s.Claim(t.Context(), ports.ClaimRequest{Owner: "a", Now: now, Limit: 1})
	_, checks["record no owner"] = s.Record(t.Context(), "", nil)
	_, checks["record bad status"] = s.Record(t.Context(), "a", []ports.Update{{ID: "x", Status: "Bogus"}})
	_, checks["query no limit"] = s.Query(t.Context(), ports.Filter{}, ports.PageRequest{})
	_, checks["query bad status"] = s.Query(t.Context(), ports.Filter{Statuses: []ports.Status{ports.StatusForwarding}}, ports.PageRequest{Limit: 1})
	_, checks["query bad cursor"] = s.Query(t.Context(), ports.Filter{}, ports.PageRequest{Limit: 1, After: "m1.!!!"})
	_, checks["transition bad status"] = s.Transition(t.Context(), ports.TransitionRequest{From: ports.StatusParked, To: ports.StatusUnknown})
	_, checks["purge no limit"] = s.Purge(t.Context(), now, 0)
	checks["append no id"] = s.Append(t.Context(), []ports.AuditRecord{{At: now}})
	for name, err := range checks {
		if !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: err = %v, want ports.ErrInvalid", name, err)
		}
	}
}
