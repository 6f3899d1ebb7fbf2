package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestDevSitesFromTheCLI runs outbox sites and outbox site-calls, the
// built binary, against a real outbox dev: central shows the dev site
// connected with its three nodes and its leader, as the nodes report over
// the link, and an empty mirror lists nothing and retries nothing.
func TestDevSitesFromTheCLI(t *testing.T) {
	p, info := startDev(t)
	defer stopDev(t, p)
	server := strings.TrimSuffix(info.page, "/")
	token := strings.TrimPrefix(strings.Fields(p.waitFor(t, "export OUTBOX_SERVER=", time.Second))[2], "OUTBOX_TOKEN=")
	env := childEnv("OUTBOX_SERVER="+server, "OUTBOX_TOKEN="+token, "TZ=UTC")

	waittest.For(t, runTimeout, "the dev site connected with three nodes and a leader", func() (bool, string) {
		code, out, errw := runCLI(t, env, "", "sites", "--json")
		var sites []api.Site
		if code != 0 || json.Unmarshal([]byte(out), &sites) != nil {
			return false, fmt.Sprintf("exit %d\n%s%s", code, out, errw)
		}
		if len(sites) != 1 || sites[0].State != ports.SiteConnected || sites[0].Leader == "" || len(sites[0].Nodes) != 3 {
			return false, out
		}
		return true, ""
	})
	code, out, errw := runCLI(t, env, "", "sites")
	if code != 0 || !strings.Contains(out, "connected") || !strings.Contains(out, " UTC)") || !strings.Contains(out, "leader") {
		t.Errorf("outbox sites: exit %d\n%s%s", code, out, errw)
	}
	code, out, errw = runCLI(t, env, "", "site-calls", "list", "--status", "Parked")
	if code != 0 || out != "" || !strings.Contains(errw, "no site calls match") {
		t.Errorf("outbox site-calls list: exit %d\n%s%s", code, out, errw)
	}
	code, out, errw = runCLI(t, env, "", "site-calls", "retry", "--all")
	if code != 0 || !strings.Contains(out, "no parked site calls match: nothing to retry") {
		t.Errorf("outbox site-calls retry --all: exit %d\n%s%s", code, out, errw)
	}
}
