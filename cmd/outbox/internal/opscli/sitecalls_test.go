package opscli

import (
	"encoding/json"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// siteOp is a site's tracking row: a call to erp.post (a write to the
// connection historian for OpWrite) in status st at version v, last changed
// at updated.
func siteOp(id string, kind ports.OpKind, st ports.OpStatus, v uint64, updated time.Time) ports.Operation {
	op := ports.Operation{ID: id, Kind: kind, Target: "erp", Method: "post", Status: st, RetryCount: int(v) - 1,
		LastError: "503 from erp\x1b[31m", SourceScript: "OnAlarm", CreatedAt: testNow, UpdatedAt: updated, Version: v}
	if kind == ports.OpWrite {
		op.Target, op.Method = "historian", ""
	}
	if st.Terminal() {
		op.TerminalAt = updated
	}
	return op
}

// report stores ops as site's telemetry.
func (c *testCentral) report(site string, ops ...ports.Operation) {
	c.t.Helper()
	if err := c.svc.ReportOperations(c.t.Context(), ports.OpReport{Site: site, Ops: ops}); err != nil {
		c.t.Fatalf("report of %s: %v", site, err)
	}
}

// health records the health of site's node with role, and returns the
// commands central relays to it when it leads.
func (c *testCentral) health(site, node string, role ports.Role) []ports.SiteCommand {
	c.t.Helper()
	ans, err := c.svc.Sync(c.t.Context(), ports.SyncRequest{Site: site, Leads: role == ports.RoleLeader,
		Health: ports.SiteHealth{Node: node, Backlog: 5, Replica: ports.ReplicaState{Node: node, Role: role, Term: 7, Leader: "n1"},
			LastCentralContact: testNow, Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 2, Parked: 1},
				{Kind: ports.OpWrite, Backlog: 3, Parked: 4}}}})
	if err != nil {
		c.t.Fatalf("sync of %s/%s: %v", site, node, err)
	}
	return ans.Commands
}

// newID is a new tracked operation id.
func newID() string { return uuid.Must(uuid.NewV7()).String() }

func TestOpsSiteCallsListShowCount(t *testing.T) {
	c := newTestCentral(t)
	parked, write, other := newID(), newID(), newID()
	c.report("plant-1", siteOp(parked, ports.OpCall, ports.OpParked, 4, testNow.Add(time.Minute)),
		siteOp(write, ports.OpWrite, ports.OpPending, 1, testNow))
	c.report("plant-2", siteOp(other, ports.OpCall, ports.OpDelivered, 2, testNow))

	code, _, stderr := runCmd(t, SiteCalls, c.environ(), "", "list", "--status", "parked,pending", "--site", "plant-1",
		"--kind", "call", "--target", "erp", "--from", "2026-03-01", "--updated-to", "2026-03-02T12:30:00+02:00", "--q", "oven", "--limit", "10")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	want := url.Values{"status": {"Parked", "Pending"}, "site": {"plant-1"}, "kind": {"ExternalCall"}, "target": {"erp"},
		"from": {"2026-03-01T00:00:00Z"}, "updated_to": {"2026-03-02T10:30:00Z"}, "q": {"oven"}, "limit": {"10"}}
	if r := c.last(); r.Path != "/api/v1/site-calls" || !reflect.DeepEqual(r.Query, want) {
		t.Errorf("request %s %v, want %v", r.Path, r.Query, want)
	}

	code, stdout, stderr := runCmd(t, SiteCalls, c.environ(), "", "list", "--site", "plant-1")
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "SITE ") {
		t.Fatalf("exit %d, table:\n%s%s", code, stdout, stderr)
	}
	if !regexpLine(stdout, `^plant-1\s+`+write+`\s+write\s+historian\s+Pending\s+0\s+2026-03-01 10:00:00`) ||
		!regexpLine(stdout, `^plant-1\s+`+parked+`\s+call\s+erp\.post\s+Parked\s+3\s+.*\s+-\s+503 from erp \[31m$`) ||
		strings.Contains(stdout, "\x1b") {
		t.Errorf("table:\n%q", stdout)
	}

	code, stdout, stderr = runCmd(t, SiteCalls, c.environ(), "", "count", "--kind", "write")
	if code != exitOK || stdout != "1\n" || c.last().Query.Get("kind") != "DatabaseWrite" {
		t.Errorf("count: exit %d, %q %q", code, stdout, stderr)
	}

	code, stdout, stderr = runCmd(t, SiteCalls, c.environ(), "", "show", "plant-1", parked)
	if code != exitOK {
		t.Fatalf("show: exit %d %s", code, stderr)
	}
	for _, s := range []string{"site:", "plant-1", "kind:", "call", "target:", "erp", "method:", "post", "status:", "Parked",
		"retries:", "3", "script:", "OnAlarm", "version:", "4"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("show lacks %q:\n%s", s, stdout)
		}
	}
	if strings.Contains(stdout, "requested:") || strings.Contains(stdout, "commands:") {
		t.Errorf("show invents a request:\n%s", stdout)
	}
	code, stdout, _ = runCmd(t, SiteCalls, c.environ(), "", "show", "plant-1", parked, "--json")
	var d api.SiteCallDetail
	if code != exitOK || json.Unmarshal([]byte(stdout), &d) != nil || d.ID != parked || d.Commands == nil {
		t.Errorf("show --json: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = runCmd(t, SiteCalls, c.environ(), "", "show", "plant-2", parked)
	if code != exitFailure || stdout != "" || !strings.HasPrefix(stderr, "outbox site-calls show: site call ") || !strings.HasSuffix(stderr, `of site "plant-2" not found`+"\n") {
		t.Errorf("unknown row: exit %d, %q %q", code, stdout, stderr)
	}

	// Every page, as JSON.
	code, stdout, _ = runCmd(t, SiteCalls, c.environ(), "", "list", "--all-pages", "--limit", "1", "--json")
	var page api.SiteCallPage
	if code != exitOK || json.Unmarshal([]byte(stdout), &page) != nil || len(page.Items) != 3 || page.Next != "" {
		t.Errorf("all pages: exit %d\n%s", code, stdout)
	}
}

func TestOpsSiteCallsRetryByKeysAndConfirmedFilter(t *testing.T) {
	c := newTestCentral(t)
	a, b, delivered, elsewhere := newID(), newID(), newID(), newID()
	c.report("plant-1", siteOp(a, ports.OpCall, ports.OpParked, 2, testNow), siteOp(b, ports.OpWrite, ports.OpParked, 2, testNow),
		siteOp(delivered, ports.OpCall, ports.OpDelivered, 2, testNow))
	c.report("plant-2", siteOp(elsewhere, ports.OpCall, ports.OpParked, 2, testNow))

	// A viewer is refused, and nothing is relayed.
	code, _, stderr := runCmd(t, SiteCalls, c.environToken(c.tokens[ports.RoleViewer]), "", "retry", "plant-1", a)
	if code != exitFailure || !strings.HasPrefix(stderr, "outbox site-calls retry: this needs the operator role") {
		t.Fatalf("viewer: exit %d, %q", code, stderr)
	}
	if cmds := c.health("plant-1", "n1", ports.RoleLeader); len(cmds) != 0 {
		t.Fatalf("a viewer's retry relayed %+v", cmds)
	}

	// By keys: at once; a refusal is a failure naming the reason.
	operator := c.environToken(c.tokens[ports.RoleOperator])
	code, stdout, stderr := runCmd(t, SiteCalls, operator, "", "retry", "plant-1", a, delivered)
	if code != exitFailure || !strings.Contains(stdout, "retry requested for 1 site call; each changes when its site reports") ||
		!regexpLine(stdout, `^plant-1\s+`+delivered+`\s+.*is Delivered; only Parked`) || !strings.Contains(stderr, "1 of 2 site calls refused") {
		t.Fatalf("by keys: exit %d, %q %q", code, stdout, stderr)
	}
	if last := c.last(); last.Path != "/api/v1/site-calls/retry" ||
		!jsonEqual(t, last.Body, `{"keys":[{"site":"plant-1","id":"`+a+`"},{"site":"plant-1","id":"`+delivered+`"}]}`) {
		t.Errorf("request %+v", last)
	}
	_, stdout, _ = runCmd(t, SiteCalls, c.environ(), "", "show", "plant-1", a)
	if !regexpLine(stdout, `^requested:\s+Retry requested by token:cli-operator at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, until the site reports$`) ||
		!regexpLine(stdout, `\s+Retry\s+token:cli-operator\s+Requested\s+-`) {
		t.Errorf("show after the retry:\n%s", stdout)
	}
	_, stdout, _ = runCmd(t, SiteCalls, c.environ(), "", "list", "--status", "Parked", "--site", "plant-1")
	if !regexpLine(stdout, a+`.*Retry by token:cli-operator`) {
		t.Errorf("list after the retry:\n%s", stdout)
	}

	// By filter: the count first, nothing relayed.
	n := len(c.requests())
	code, stdout, stderr = runCmd(t, SiteCalls, operator, "", "discard", "--site", "plant-1")
	pin := regexp.MustCompile(`2 parked site calls match; repeat with -yes -reported-to (\S+) to discard them`).FindStringSubmatch(stderr)
	if code != exitPreview || pin == nil || stdout != "" {
		t.Fatalf("preview: exit %d, %q %q", code, stdout, stderr)
	}
	reqs := c.requests()[n:]
	if len(reqs) != 1 || reqs[0].Path != "/api/v1/site-calls/count" ||
		!reflect.DeepEqual(reqs[0].Query, url.Values{"site": {"plant-1"}, "status": {"Parked"}}) {
		t.Fatalf("preview sent %+v", reqs)
	}
	// A row the site parked before the count reaches central after it
	// (late telemetry); the confirmation leaves it alone.
	pinned, err := time.Parse(time.RFC3339, pin[1])
	if err != nil {
		t.Fatal(err)
	}
	later := newID()
	c.clock.Advance(pinned.Sub(c.clock.Now()) + time.Minute) // central's clock past the count
	c.report("plant-1", siteOp(later, ports.OpCall, ports.OpParked, 3, pinned.Add(-time.Minute)))
	code, stdout, stderr = runCmd(t, SiteCalls, operator, "", "discard", "--site", "plant-1", "--yes", "--reported-to", pin[1])
	// a has a Retry pending: refused; b is requested.
	if code != exitFailure || !strings.Contains(stdout, "discard requested for 1 site call;") || !regexpLine(stdout, a+`.*has a Retry requested`) {
		t.Fatalf("confirmed: exit %d, %q %q", code, stdout, stderr)
	}
	if last := c.last(); !jsonEqual(t, last.Body, `{"filter":{"site":"plant-1","reported_to":"`+pin[1]+`"}}`) {
		t.Errorf("confirmed request %s", last.Body)
	}
	cmds := c.health("plant-1", "n1", ports.RoleLeader)
	got := map[string]ports.SiteCommandAction{}
	for _, cmd := range cmds {
		got[cmd.OperationID] = cmd.Action
	}
	if !reflect.DeepEqual(got, map[string]ports.SiteCommandAction{a: ports.SiteRetry, b: ports.SiteDiscard}) {
		t.Errorf("relayed %v; %s (parked after the count) must not be", got, later)
	}

	// --all: the same rule, and the command it prints works as printed;
	// nothing parked: nothing to confirm.
	code, _, stderr = runCmd(t, SiteCalls, operator, "", "retry", "--all")
	allPin := regexp.MustCompile(`^\d parked site calls match; repeat with -yes -reported-to (\S+) to retry them$`).FindStringSubmatch(strings.TrimSpace(stderr))
	if code != exitPreview || allPin == nil {
		t.Fatalf("--all: exit %d, %q", code, stderr)
	}
	code, stdout, stderr = runCmd(t, SiteCalls, operator, "", "retry", "--all", "--yes", "--reported-to", allPin[1])
	if !strings.Contains(stdout, "retry requested for") || !jsonEqual(t, c.last().Body, `{"filter":{"reported_to":"`+allPin[1]+`"}}`) {
		t.Errorf("--all as printed: exit %d, %q %q, body %s", code, stdout, stderr, c.last().Body)
	}
	code, stdout, _ = runCmd(t, SiteCalls, operator, "", "retry", "--site", "plant-9")
	if code != exitOK || !strings.Contains(stdout, "nothing to retry") {
		t.Errorf("nothing parked: exit %d, %q", code, stdout)
	}
}

func TestOpsSiteCallsUsageErrors(t *testing.T) {
	c := newTestCentral(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"list", "--status", "Lost"}, `-status: unknown status "Lost"`},
		{[]string{"list", "--kind", "teleport"}, `-kind: unknown kind "teleport"`},
		{[]string{"count", "--from", "yesterday"}, `-from: "yesterday" is not a time`},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"list", "--limit", "-3"}, "-limit must be positive"},
		{[]string{"show", "plant-1"}, "give the site and the id of one site call"},
		{[]string{"retry"}, "give the site and ids to retry, filters selecting them, or -all"},
		{[]string{"retry", "plant-1"}, "give the site and then the ids"},
		{[]string{"discard", "plant-1", "id1", "--kind", "call"}, "not several"},
		{[]string{"discard", "--all", "--site", "p"}, "without filters"},
		{[]string{"retry", "--status", "Failed", "--yes"}, "only Parked site calls can be retried"},
		{[]string{"frob"}, `outbox site-calls: unknown command "frob"`},
	} {
		code, stdout, stderr := runCmd(t, SiteCalls, c.environ(), "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.stderr) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.stderr)
		}
	}
	if code, _, stderr := runCmd(t, Sites, c.environ(), "", "a", "b"); code != exitUsage || !strings.Contains(stderr, "at most one site") {
		t.Errorf("sites a b: exit %d, %q", code, stderr)
	}
	if n := len(c.requests()); n != 0 {
		t.Errorf("%d requests sent for bad usage", n)
	}
	for name, cmd := range map[string]command{"site-calls": SiteCalls, "sites": Sites} {
		code, stdout, _ := runCmd(t, cmd, nil, "", "help")
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: outbox "+name) || !strings.Contains(stdout, "-token-file") {
			t.Errorf("%s help: exit %d, %q", name, code, stdout)
		}
	}
}

func TestOpsSites(t *testing.T) {
	c := newTestCentral(t)
	c.health("plant-1", "n1", ports.RoleLeader)
	c.health("plant-1", "n2", ports.RoleFollower)
	c.report("plant-1", siteOp(newID(), ports.OpCall, ports.OpParked, 2, testNow))
	c.report("plant-2", siteOp(newID(), ports.OpCall, ports.OpRetrying, 2, testNow))

	code, stdout, stderr := runCmd(t, Sites, c.environ(), "")
	if code != exitOK {
		t.Fatalf("exit %d %s", code, stderr)
	}
	for _, re := range []string{
		`^SITE\s+STATE\s+LAST CONTACT\s+LEADER\s+NODES\s+CACHED CALLS$`,
		`^plant-1\s+connected\s+\S+ ago \(2026-03-01 10:00:00 UTC\)\s+n1\s+2\s+1 parked, 0 retrying, 0 pending, 0 failed in the last hour$`,
		`^plant-2\s+disconnected\s+never\s+-\s+0\s+0 parked, 1 retrying`,
		`^plant-1\s+n1\s+leader\s+7\s+\S+ ago\s+5\s+-\s+2/1\s+3/4\s+\S+ ago\s+-$`,
		`^plant-1\s+n2\s+follower\s+7\s+`,
	} {
		if !regexpLine(stdout, re) {
			t.Errorf("no line matches %s in\n%s", re, stdout)
		}
	}

	code, stdout, _ = runCmd(t, Sites, c.environ(), "", "plant-1")
	if code != exitOK || c.last().Path != "/api/v1/sites/plant-1" || !regexpLine(stdout, `^state:\s+connected$`) ||
		!regexpLine(stdout, `^leader:\s+n1$`) || !regexpLine(stdout, `^last contact:\s+\S+ ago \(2026-03-01 10:00:00 UTC\)$`) ||
		!regexpLine(stdout, `^plant-1\s+n2\s+follower`) {
		t.Errorf("one site: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCmd(t, Sites, c.environ(), "", "--json")
	var sites []api.Site
	if code != exitOK || json.Unmarshal([]byte(stdout), &sites) != nil || len(sites) != 2 || len(sites[0].Nodes) != 2 {
		t.Errorf("--json: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = runCmd(t, Sites, c.environ(), "", "plant-9")
	if code != exitFailure || stdout != "" || stderr != "outbox sites: site \"plant-9\" never reported to central\n" {
		t.Errorf("unknown site: exit %d, %q %q", code, stdout, stderr)
	}
}
