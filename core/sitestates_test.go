package core

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// kpiCounting is a mirror that counts the reads of its KPIs.
type kpiCounting struct {
	ports.SiteCallStore
	kpis atomic.Int32
}

func (k *kpiCounting) SiteCallKPIs(ctx context.Context, req ports.SiteCallKPIRequest) ([]ports.SiteCallKPI, error) {
	k.kpis.Add(1)
	return k.SiteCallStore.SiteCallKPIs(ctx, req)
}

// TestSiteStatesAreSitesWithoutTheCounts: SiteStates lists the sites whose
// nodes reported with the states, last contacts, leaders and nodes of
// Sites, and no count, without reading the mirror's KPIs; a site known
// only by its mirror rows is left out. Without a mirror it is Unavailable.
func TestSiteStatesAreSitesWithoutTheCounts(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	mirror := &kpiCounting{SiteCallStore: store}
	svc, err := New(Config{}, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{}, Directory: okDirectory{},
		SiteCalls: mirror})
	if err != nil {
		t.Fatal(err)
	}
	report(t, svc, "north", opAt("p1", 4, ports.OpParked), opAt("r1", 1, ports.OpRetrying))
	report(t, svc, "south", opAt("p2", 2, ports.OpParked)) // mirror rows, no node's report
	for _, h := range []struct {
		site, node string
		role       ports.Role
	}{{"north", "n1", ports.RoleLeader}, {"north", "n2", ports.RoleFollower}, {"east", "e1", ports.RoleFollower}} {
		if _, err := svc.Sync(ctx, ports.SyncRequest{Site: h.site, Health: ports.SiteHealth{Node: h.node, Backlog: 7,
			Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 1, Parked: 1}},
			Replica:    ports.ReplicaState{Node: h.node, Role: h.role}}}); err != nil {
			t.Fatal(err)
		}
	}

	states, err := svc.SiteStates(ctx)
	if err != nil {
		t.Fatalf("SiteStates: %v", err)
	}
	if n := mirror.kpis.Load(); n != 0 {
		t.Fatalf("SiteStates read the mirror's KPIs %d times; want none", n)
	}
	sites, err := svc.Sites(ctx)
	if err != nil {
		t.Fatalf("Sites: %v", err)
	}
	if n := mirror.kpis.Load(); n != 1 {
		t.Fatalf("Sites read the mirror's KPIs %d times; want once", n)
	}
	var want []ports.SiteView
	for _, v := range sites {
		if v.Site == "north" && v.Calls.Parked != 1 {
			t.Fatalf("Sites has north without its mirror's counts: %+v", v.Calls)
		}
		if len(v.Nodes) == 0 {
			continue // south: only in the mirror
		}
		v.Calls = ports.SiteCallKPI{Site: v.Site}
		want = append(want, v)
	}
	if len(sites) != 3 || len(want) != 2 || want[0].Site != "east" || want[1].Leader != "n1" || len(want[1].Nodes) != 2 {
		t.Fatalf("Sites: %+v", sites)
	}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("SiteStates:\n%+v\nwant Sites without the counts:\n%+v", states, want)
	}

	bare, err := New(Config{}, Deps{Store: store, Audit: store, Channels: ports.ChannelMap{}, Directory: okDirectory{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.SiteStates(ctx); !errors.Is(err, ports.ErrUnavailable) {
		t.Errorf("SiteStates without a mirror = %v; want ErrUnavailable", err)
	}
}
