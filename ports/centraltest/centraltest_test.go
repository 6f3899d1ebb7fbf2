package centraltest_test

import (
	"context"
	"testing"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/centraltest"
)

// newService returns a core.Service on an empty memory store and directory.
func newService(t *testing.T) (*core.Service, *memstore.Store) {
	t.Helper()
	store := memstore.New()
	dir, err := memdir.New(centraltest.Lists, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, store
}

// asSite is a ports.Central that calls as an authenticated site, as the site
// link's server does.
type asSite struct {
	ports.Central
	site string
}

func (a asSite) Submit(ctx context.Context, req ports.SubmitRequest) (ports.SubmitResult, error) {
	req.Site = a.site
	return a.Central.Submit(ctx, req)
}

func (a asSite) Status(ctx context.Context, req ports.StatusRequest) (map[string]ports.Status, error) {
	req.Site = a.site
	return a.Central.Status(ctx, req)
}

// TestCoreTrusted runs the contract on core.Service called as a trusted
// local caller.
func TestCoreTrusted(t *testing.T) {
	centraltest.Exercise(t, func(t *testing.T) centraltest.Target {
		svc, store := newService(t)
		return centraltest.Target{Central: svc, Stored: centraltest.FromStore(store)}
	})
}

// TestCoreAsSite runs the contract on core.Service called in the name of an
// authenticated site.
func TestCoreAsSite(t *testing.T) {
	centraltest.Exercise(t, func(t *testing.T) centraltest.Target {
		svc, store := newService(t)
		return centraltest.Target{Central: asSite{Central: svc, site: "site-north"}, Site: "site-north",
			Stored: centraltest.FromStore(store), Trusted: svc}
	})
}

// siteCaller is core.Service called as an authenticated site, as the site
// link's server calls it: the request's site is the caller's.
type siteCaller struct {
	*core.Service
	site string
}

func (c siteCaller) ReportOperations(ctx context.Context, req ports.OpReport) error {
	req.Site = c.site
	return c.Service.ReportOperations(ctx, req)
}

func (c siteCaller) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	req.Site = c.site
	return c.Service.Sync(ctx, req)
}

// TestCoreSites runs the contract of a site's cached operations on
// core.Service over memstore's mirror.
func TestCoreSites(t *testing.T) {
	centraltest.ExerciseSites(t, func(t *testing.T) centraltest.SitesTarget {
		store := memstore.New()
		dir, err := memdir.New(centraltest.Lists, nil)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir,
			Channels: ports.ChannelMap{}, SiteCalls: store})
		if err != nil {
			t.Fatal(err)
		}
		return centraltest.SitesTarget{Central: siteCaller{Service: svc, site: "site-north"}, Site: "site-north", Mirror: store}
	})
}
