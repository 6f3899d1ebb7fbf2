package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestCentralMetricsShowTheSites: the real `outbox central` exports on its
// /metrics each site's state, last contact, backlog per kind and parked
// calls and writes, from what the site's nodes report over the link; the
// state follows outbox.site_stale_after and site_disconnected_after.
// (The site link's end to end, real site processes included, is the
// acceptance tests'.)
func TestCentralMetricsShowTheSites(t *testing.T) {
	c := startLinkCentral(t, "outbox:\n  site_stale_after: 2s\n  site_disconnected_after: 10s\n")
	link, err := sitelink.Dial(sitelink.ClientConfig{Addr: c.addr, Token: "tok-plant-1-a8e3f0c2d9b1"})
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	health := func(node string, role ports.Role, backlog, calls, parkedCalls, writes, parkedWrites int64) ports.SiteHealth {
		return ports.SiteHealth{Node: node, Backlog: backlog, Replica: ports.ReplicaState{Node: node, Role: role, Leader: "a"},
			Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: calls, Parked: parkedCalls},
				{Kind: ports.OpWrite, Backlog: writes, Parked: parkedWrites}}}
	}
	// The follower reports after the leader: the leader's counts stand
	// for the site all the same.
	for _, h := range []ports.SiteHealth{health("a", ports.RoleLeader, 12, 5, 3, 2, 1), health("b", ports.RoleFollower, 11, 4, 3, 2, 1)} {
		if _, err := link.Sync(ctx, ports.SyncRequest{Site: "plant-1", Health: h}); err != nil {
			t.Fatalf("Sync of node %s: %v", h.Node, err)
		}
	}
	waitMetrics := func(what string, want map[string]string) {
		t.Helper()
		waittest.For(t, 30*time.Second, what, func() (bool, string) {
			for series, v := range want {
				if got := c.metric(t, series); got != series+" "+v {
					return false, fmt.Sprintf("%s: %q, want %s", series, got, v)
				}
			}
			return true, ""
		})
	}
	waitMetrics("the site connected, with its leader's counts", map[string]string{
		`outbox_sites_up`: "1",
		`outbox_site_state{site="plant-1",state="connected"}`:              "1",
		`outbox_site_state{site="plant-1",state="stale"}`:                  "0",
		`outbox_site_reported_backlog{kind="notification",site="plant-1"}`: "12",
		`outbox_site_reported_backlog{kind="call",site="plant-1"}`:         "5",
		`outbox_site_reported_backlog{kind="write",site="plant-1"}`:        "2",
		`outbox_site_reported_parked{kind="call",site="plant-1"}`:          "3",
		`outbox_site_reported_parked{kind="write",site="plant-1"}`:         "1",
	})
	if l := c.metric(t, `outbox_site_last_contact_seconds{site="plant-1"}`); l == "" {
		t.Error("/metrics has no outbox_site_last_contact_seconds for plant-1")
	}
	// No report: stale after 2 s, disconnected after 10 s (a read of the
	// sites serves the scrapes of 5 s, so a state shows up to 5 s late).
	waitMetrics("the site stale", map[string]string{`outbox_site_state{site="plant-1",state="stale"}`: "1"})
	waitMetrics("the site disconnected", map[string]string{`outbox_site_state{site="plant-1",state="disconnected"}`: "1",
		`outbox_site_state{site="plant-1",state="stale"}`: "0"})
	var age float64
	if _, err := fmt.Sscanf(c.metric(t, `outbox_site_last_contact_seconds{site="plant-1"}`),
		`outbox_site_last_contact_seconds{site="plant-1"} %g`, &age); err != nil || age < 10 {
		t.Errorf("last contact %gs ago (%v); want at least the 10s after which the site is disconnected", age, err)
	}
}
