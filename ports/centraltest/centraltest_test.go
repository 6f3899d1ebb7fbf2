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
