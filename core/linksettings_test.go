package core

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
)

// TestSiteStatesFollowConfiguredThresholds: with SiteStaleAfter and
// SiteDisconnectedAfter set, a site turns stale and disconnected at those
// times, not the defaults; a leader's long poll is held at most two thirds
// of the stale time, whatever it asks; and a leader's Sync after a gap
// longer than the stale time asks for the feed.
func TestSiteStatesFollowConfiguredThresholds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cfg := Config{SiteStaleAfter: 3 * time.Second, SiteDisconnectedAfter: 7 * time.Second, ReconcileInterval: time.Hour}
		svc := newCentral(t, memstore.New(), cfg)
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed == nil {
			t.Fatal("the first leader Sync asked for no feed")
		}
		if err := svc.ReportOperations(ctx, ports.OpReport{Site: "north", Ops: []ports.Operation{opAt("a", 1, ports.OpPending)},
			Feed: &ports.FeedPage{Epoch: "E1", Next: "p1", Last: true}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if ans := leaderSync(t, svc, "north", "n1", ports.MaxSyncWait); ans.Feed != nil || len(ans.Commands) != 0 {
			t.Fatalf("an idle long poll answered %+v", ans)
		}
		if waited, want := time.Since(start), 2*time.Second; waited != want {
			t.Errorf("a long poll asking %s waited %s; want %s (two thirds of the stale time)", ports.MaxSyncWait, waited, want)
		}
		last := start // the Sync recorded the health as it began
		for _, step := range []struct {
			after time.Duration
			want  ports.SiteState
		}{
			{3 * time.Second, ports.SiteConnected},
			{3*time.Second + time.Millisecond, ports.SiteStale},
			{7 * time.Second, ports.SiteStale},
			{7*time.Second + time.Millisecond, ports.SiteDisconnected},
		} {
			time.Sleep(time.Until(last.Add(step.after)))
			sites, err := svc.Sites(ctx)
			if err != nil || len(sites) != 1 {
				t.Fatalf("Sites: %+v, %v", sites, err)
			}
			if sites[0].State != step.want {
				t.Fatalf("%s after the last report: %s; want %s", step.after, sites[0].State, step.want)
			}
			if got := cfg.WithDefaults().SiteStateAt(last, last.Add(step.after)); got != step.want {
				t.Errorf("SiteStateAt %s after: %s; want %s", step.after, got, step.want)
			}
		}
		// Back after longer than the stale time: central asks for the feed.
		if ans := leaderSync(t, svc, "north", "n1", 0); ans.Feed == nil {
			t.Error("a leader back after the configured stale time was not asked for its feed")
		}
	})
}

// TestConfigSiteThresholdsValidated: the stale time has a floor, and a site
// must turn stale before it is disconnected.
func TestConfigSiteThresholdsValidated(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.SiteStaleAfter != ports.SiteStaleAfter || c.SiteDisconnectedAfter != ports.SiteDisconnectedAfter {
		t.Fatalf("defaults %s, %s; want the ports' %s, %s", c.SiteStaleAfter, c.SiteDisconnectedAfter,
			ports.SiteStaleAfter, ports.SiteDisconnectedAfter)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{SiteStaleAfter: time.Second}, "SiteStaleAfter: must be at least 2s (and above the sites' report interval), got 1s"},
		{Config{SiteStaleAfter: time.Minute, SiteDisconnectedAfter: time.Minute},
			"SiteDisconnectedAfter: 1m0s must exceed SiteStaleAfter (1m0s)"},
		{Config{SiteStaleAfter: 5 * time.Minute}, "SiteDisconnectedAfter: 3m0s must exceed SiteStaleAfter (5m0s)"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{SiteStaleAfter: 2 * time.Second, SiteDisconnectedAfter: 3 * time.Second}).WithDefaults().Validate(); err != nil {
		t.Errorf("short thresholds in order: %v", err)
	}
}

// TestSiteReportIntervalValidated: the report interval is bounded by the
// floor and by the longest wait central holds a Sync.
func TestSiteReportIntervalValidated(t *testing.T) {
	if got := (SiteConfig{}).WithDefaults().ReportInterval; got != ports.SiteReportInterval {
		t.Fatalf("default report interval %s; want %s", got, ports.SiteReportInterval)
	}
	for _, d := range []time.Duration{-time.Second, 50 * time.Millisecond, ports.MaxSyncWait + time.Second} {
		err := SiteConfig{Site: "plant-1", ReportInterval: d}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "ReportInterval: must be between 100ms and 30s") {
			t.Errorf("report interval %s: %v", d, err)
		}
	}
	for _, d := range []time.Duration{MinReportInterval, ports.MaxSyncWait} {
		if err := (SiteConfig{Site: "plant-1", ReportInterval: d}).WithDefaults().Validate(); err != nil {
			t.Errorf("report interval %s: %v", d, err)
		}
	}
}

// TestSyncUsesTheReportInterval: a follower reports at the configured
// interval, and the leader's long poll asks central to wait that long.
func TestSyncUsesTheReportInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newSyncEnv(t, SiteConfig{ReportInterval: 5 * time.Second})
		e.leads.Store(false)
		e.sync(t)
		synctest.Wait()
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		e.central.mu.Lock()
		syncs := slices.Clone(e.central.syncs)
		e.central.mu.Unlock()
		if len(syncs) != 12 {
			t.Errorf("%d follower Syncs in a minute, want 12 (every 5s)", len(syncs))
		}
		e.leads.Store(true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		e.central.mu.Lock()
		last := e.central.syncs[len(e.central.syncs)-1]
		e.central.mu.Unlock()
		if !last.Leads || last.Wait != 5*time.Second {
			t.Errorf("the leader's Sync: leads %t, wait %s; want a long poll of 5s", last.Leads, last.Wait)
		}
	})
}
