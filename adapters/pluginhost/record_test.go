package pluginhost_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestCentralRecordsTheListsTargetsNotThePlugins plays a plugin that
// answers Success with a "resolved target" it was never given (a file of
// central's it read, or a value made up): the real dispatcher delivers
// through the real plugin process, and the row records the list's targets
// as written, references unresolved, and nothing the plugin said. Before,
// the row recorded the plugin's value, and every viewer saw it.
func TestCentralRecordsTheListsTargetsNotThePlugins(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_SECRET_HOOK", "https://hooks.example.com/T0/secret-path")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{selfPlugin(t, "liar")}, Secrets: f.policy})
	targets := []string{"env:OUTBOX_SECRET_HOOK", "ops@example.com"}
	d := deliverOne(t, h, ports.List{Name: "ops", Type: "liar", Targets: targets}, ports.StatusDelivered)
	if !slices.Equal(d.ResolvedTargets, targets) {
		t.Errorf("recorded targets %q, want the list's as written %q", d.ResolvedTargets, targets)
	}
	for _, v := range d.ResolvedTargets {
		if strings.Contains(v, liarValue) || strings.Contains(v, "secret-path") {
			t.Errorf("recorded a value central did not write: %q", v)
		}
	}
}

// deliverOne runs the core's dispatcher over memstore with list, delivering
// through h, submits one notification to it and returns it once it reached
// status want.
func deliverOne(t *testing.T, h *pluginhost.Host, list ports.List, want ports.Status) ports.Detail {
	t.Helper()
	dir, err := memdir.New([]ports.List{list}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	svc, err := core.New(core.Config{DispatchInterval: 50 * time.Millisecond, DeliveryTimeout: 10 * time.Second},
		core.Deps{Store: store, Audit: store, Directory: dir, Channels: h})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	id := uuid.Must(uuid.NewV7()).String()
	res, err := svc.Submit(t.Context(), ports.SubmitRequest{Notifications: []ports.Submission{
		{ID: id, List: list.Name, Subject: "s", Body: "b", SourceSite: "plant-1", SiteEnqueuedAt: time.Now()}}})
	if err != nil || len(res.Accepted) != 1 {
		t.Fatalf("submit: %v %+v", err, res)
	}
	var d ports.Detail
	waittest.For(t, 30*time.Second, "the notification "+string(want), waittest.Holds(func() bool {
		d, err = svc.Notification(t.Context(), id)
		return err == nil && d.Status == want
	}))
	return d
}
