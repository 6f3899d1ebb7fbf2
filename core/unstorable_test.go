package core

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/ports"
)

// TestUnstorableTargetParksItsRowOnly: a list holding a target no store can
// keep (a NUL byte: the directory refuses it now, but a list stored before
// may hold one) parks its row untried, and the other rows of the batch are
// delivered and recorded, on the SQL store, which refuses such text.
func TestUnstorableTargetParksItsRowOnly(t *testing.T) {
	ctx := t.Context()
	bad := ports.List{Name: "mail", Type: "email", Targets: []string{"good@example.com", "bad\x00@example.com"}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "NUL byte") {
		t.Fatalf("List.Validate: %v, want the NUL byte refused", err)
	}
	db, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: filepath.Join(t.TempDir(), "o.db")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	store := db.Notifications()
	dir := &twoLists{bad: bad.Targets}
	ch := newTargetChannel(nil)
	svc, err := New(Config{DispatchBatchSize: 10}, Deps{Store: store, Audit: store, Directory: dir,
		Channels: ports.ChannelMap{"email": ch}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{uuid.NewString(), uuid.NewString()}
	res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: []ports.Submission{
		{ID: ids[0], List: "mail", Subject: "s", SourceSite: "site-a"},
		{ID: ids[1], List: "other", Subject: "s", SourceSite: "site-a"},
	}})
	if err != nil || len(res.Accepted) != 2 {
		t.Fatalf("submit: %+v, %v", res, err)
	}
	if _, err := svc.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []ports.Status{ports.StatusParked, ports.StatusDelivered} {
		n, err := store.Get(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if n.Status != want || n.ClaimedBy != "" {
			t.Errorf("row of list %s: %s, claimed by %q; want %s and recorded", n.List, n.Status, n.ClaimedBy, want)
		}
		if i == 0 && (!strings.Contains(n.LastError, "target 2 holds a NUL byte") || strings.ContainsRune(n.LastError, 0)) {
			t.Errorf("LastError %q", n.LastError)
		}
	}
	if ch.asked["good@example.com"] != 0 || ch.received["other@example.com"] != 1 {
		t.Errorf("asked %v, received %v", ch.asked, ch.received)
	}
}

// twoLists is a directory of the list "mail" (targets bad, as stored before
// the directory checked them) and the list "other" (one address).
type twoLists struct{ bad []string }

func (d *twoLists) List(_ context.Context, name string) (ports.List, error) {
	if name == "mail" {
		return ports.List{Name: name, Type: "email", Targets: d.bad}, nil
	}
	return ports.List{Name: name, Type: "email", Targets: []string{"other@example.com"}}, nil
}

func (d *twoLists) ChannelSettings(context.Context, string) (ports.ChannelSettings, error) {
	return ports.ChannelSettings{}, ports.ErrNotFound
}
