package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// siteOpAt is a site's tracking row: a call to erp.post, or a write to the
// connection historian when kind is OpWrite, in status st at version v,
// created at created and last changed at updated.
func siteOpAt(id string, kind ports.OpKind, st ports.OpStatus, v uint64, created, updated time.Time) ports.Operation {
	op := ports.Operation{ID: id, Kind: kind, Target: "erp", Method: "post", Status: st, RetryCount: int(v) - 1,
		LastError: "503 from erp", SourceInstance: "Line3.Pump", SourceScript: "OnAlarm", CreatedAt: created,
		UpdatedAt: updated, Version: v}
	if kind == ports.OpWrite {
		op.Target, op.Method = "historian", ""
	}
	if st.Terminal() {
		op.TerminalAt = updated
	}
	return op
}

// newOpID is a new tracked operation id.
func newOpID() string { return uuid.Must(uuid.NewV7()).String() }

// report stores ops as site's telemetry, as the site link does.
func (e *env) report(site string, ops ...ports.Operation) {
	e.t.Helper()
	if err := e.svc.ReportOperations(context.Background(), ports.OpReport{Site: site, Ops: ops}); err != nil {
		e.t.Fatalf("report of %s: %v", site, err)
	}
}

// siteSync is a Sync of site's node with role, not waiting: the health it
// reports and, from the leader, the answers; it returns the commands
// central relays.
func (e *env) siteSync(site, node string, role ports.Role, answers ...ports.CommandAnswer) []ports.SiteCommand {
	e.t.Helper()
	ans, err := e.svc.Sync(context.Background(), ports.SyncRequest{Site: site, Leads: role == ports.RoleLeader, Answers: answers,
		Health: ports.SiteHealth{Node: node, Backlog: 2, Replica: ports.ReplicaState{Node: node, Role: role, Term: 4, Leader: "n1"},
			Operations: []ports.OpKindStats{{Kind: ports.OpCall, Backlog: 1, Parked: 1}}}})
	if err != nil {
		e.t.Fatalf("sync of %s/%s: %v", site, node, err)
	}
	return ans.Commands
}

// siteCallDetail is GET /site-calls/{site}/{id} as a viewer.
func (e *env) siteCallDetail(site, id string) api.SiteCallDetail {
	e.t.Helper()
	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/site-calls/"+url.PathEscape(site)+"/"+id, nil)
	if code != http.StatusOK {
		e.t.Fatalf("detail of %s/%s: %d %s", site, id, code, body)
	}
	return decode[api.SiteCallDetail](e.t, body)
}

// siteCallIDs are the ids of a page's items.
func siteCallIDs(p api.SiteCallPage) []string {
	var out []string
	for _, c := range p.Items {
		out = append(out, c.ID)
	}
	return out
}

// TestSiteCallsReadThroughTheAPI: a viewer lists the mirror with each
// filter, pages through it, counts, reads a row, the KPIs per site and the
// sites with their nodes; an unknown row or site is a 404.
func TestSiteCallsReadThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	parked, delivered, write, other := newOpID(), newOpID(), newOpID(), newOpID()
	e.report("plant-1",
		siteOpAt(parked, ports.OpCall, ports.OpParked, 4, t0, t0.Add(time.Hour)),
		siteOpAt(delivered, ports.OpCall, ports.OpDelivered, 2, t0.Add(time.Minute), t0.Add(2*time.Minute)),
		siteOpAt(write, ports.OpWrite, ports.OpPending, 1, t0.Add(2*time.Minute), t0.Add(2*time.Minute)))
	e.report("plant/2", siteOpAt(other, ports.OpCall, ports.OpParked, 3, t0.Add(3*time.Minute), t0.Add(3*time.Minute)))
	e.siteSync("plant-1", "n1", ports.RoleLeader)
	e.siteSync("plant-1", "n2", ports.RoleFollower)

	list := func(query string) api.SiteCallPage {
		t.Helper()
		code, body := e.do(ports.RoleViewer, "GET", "/api/v1/site-calls?"+query, nil)
		if code != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, code, body)
		}
		return decode[api.SiteCallPage](t, body)
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{other, write, delivered, parked}},
		{"site=plant-1", []string{write, delivered, parked}},
		{"site=plant%2F2", []string{other}},
		{"status=parked", []string{other, parked}},
		{"status=Delivered,PENDING", []string{write, delivered}},
		{"kind=write", []string{write}},
		{"kind=ExternalCall&site=plant-1", []string{delivered, parked}},
		{"target=historian", []string{write}},
		{"q=LINE3.pump&status=Parked", []string{other, parked}},
		{"q=" + parked[len(parked)-12:], []string{parked}},
		{"from=2026-11-01T08:01:00Z&to=2026-11-01T08:03:00Z", []string{write, delivered}},
		{"updated_from=2026-11-01T08:30:00Z", []string{parked}},
		{"updated_to=2026-11-01T08:03:00Z", []string{write, delivered}},
	} {
		if got := siteCallIDs(list(c.query)); !slices.Equal(got, c.want) {
			t.Errorf("list ?%s: %v, want %v", c.query, got, c.want)
		}
	}

	// Keyset paging walks every row once.
	first := list("limit=3")
	second := list("limit=3&after=" + url.QueryEscape(first.Next))
	if first.Next == "" || second.Next != "" || !slices.Equal(append(siteCallIDs(first), siteCallIDs(second)...), []string{other, write, delivered, parked}) {
		t.Errorf("pages %v (next %q) and %v (next %q)", siteCallIDs(first), first.Next, siteCallIDs(second), second.Next)
	}

	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/site-calls/count?status=Parked", nil)
	if code != http.StatusOK || decode[api.Count](t, body).Count != 2 {
		t.Errorf("count: %d %s", code, body)
	}

	d := e.siteCallDetail("plant-1", parked)
	if d.Site != "plant-1" || d.Kind != ports.OpCall || d.Target != "erp" || d.Method != "post" || d.Status != ports.OpParked ||
		d.RetryCount != 3 || d.Version != 4 || d.LastError != "503 from erp" || d.SourceScript != "OnAlarm" ||
		d.CreatedAt == nil || !d.CreatedAt.Equal(t0) || d.ReportedAt == nil || d.Requested != "" || d.Commands == nil || len(d.Commands) != 0 {
		t.Errorf("detail %+v", d)
	}
	if d := e.siteCallDetail("plant/2", other); d.ID != other {
		t.Errorf("detail of a site with a slash: %+v", d)
	}
	for _, path := range []string{"/api/v1/site-calls/plant-1/" + other, "/api/v1/site-calls/nowhere/" + parked, "/api/v1/sites/nowhere"} {
		code, body := e.do(ports.RoleViewer, "GET", path, nil)
		if code != http.StatusNotFound || decode[api.ErrorBody](t, body).Error.Code != api.CodeNotFound {
			t.Errorf("GET %s: %d %s, want 404", path, code, body)
		}
	}

	code, body = e.do(ports.RoleViewer, "GET", "/api/v1/site-calls/kpis", nil)
	kpis := decode[[]api.SiteCallKPI](t, body)
	if code != http.StatusOK || len(kpis) != 2 || kpis[0].Site != "plant-1" || kpis[0].Parked != 1 || kpis[0].Pending != 1 ||
		kpis[0].OldestBufferedAt == nil || !kpis[0].OldestBufferedAt.Equal(t0) || kpis[1].Site != "plant/2" || kpis[1].Parked != 1 {
		t.Errorf("kpis: %d %s", code, body)
	}

	code, body = e.do(ports.RoleViewer, "GET", "/api/v1/sites", nil)
	sites := decode[[]api.Site](t, body)
	if code != http.StatusOK || len(sites) != 2 {
		t.Fatalf("sites: %d %s", code, body)
	}
	p1 := sites[0]
	if p1.Site != "plant-1" || p1.State != ports.SiteConnected || p1.Leader != "n1" || p1.LastContact == nil ||
		len(p1.Nodes) != 2 || p1.Nodes[0].Node != "n1" || p1.Nodes[0].Role != ports.RoleLeader || p1.Nodes[1].Role != ports.RoleFollower ||
		p1.Nodes[0].Backlog != 2 || p1.Nodes[0].Term != 4 || len(p1.Nodes[0].Operations) != 1 || p1.Nodes[0].Operations[0].Parked != 1 ||
		p1.Calls.Parked != 1 {
		t.Errorf("plant-1: %+v", p1)
	}
	// A site known only by its rows has never reported its health.
	if p2 := sites[1]; p2.Site != "plant/2" || p2.State != ports.SiteDisconnected || p2.LastContact != nil || len(p2.Nodes) != 0 || p2.Calls.Parked != 1 {
		t.Errorf("plant/2: %+v", p2)
	}
	code, body = e.do(ports.RoleViewer, "GET", "/api/v1/sites/plant-1", nil)
	if one := decode[api.Site](t, body); code != http.StatusOK || one.Site != "plant-1" || one.Leader != "n1" || len(one.Nodes) != 2 {
		t.Errorf("one site: %d %s", code, body)
	}
}

// TestSiteCallRetryIsRelayed: a viewer's Retry is refused and relays
// nothing; an operator's Retry of a Parked row relays a command and leaves
// the row Parked, showing the request, until the site reports; a row not
// Parked, or one with a request pending, is refused with its reason.
func TestSiteCallRetryIsRelayed(t *testing.T) {
	e := newEnv(t)
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	parked, delivered, unknown := newOpID(), newOpID(), newOpID()
	e.report("plant-1", siteOpAt(parked, ports.OpCall, ports.OpParked, 4, t0, t0),
		siteOpAt(delivered, ports.OpCall, ports.OpDelivered, 1, t0, t0))
	keys := []api.SiteCallKey{{Site: "plant-1", ID: parked}, {Site: "plant-1", ID: delivered}, {Site: "plant-1", ID: unknown}}

	code, body := e.do(ports.RoleViewer, "POST", "/api/v1/site-calls/retry", api.SiteCallActionRequest{Keys: keys[:1]})
	if code != http.StatusForbidden || !strings.Contains(string(body), "operator role") {
		t.Fatalf("viewer retry: %d %s", code, body)
	}
	if d := e.siteCallDetail("plant-1", parked); d.Requested != "" || len(d.Commands) != 0 {
		t.Fatalf("a viewer's retry left %+v", d)
	}
	if cmds := e.siteSync("plant-1", "n1", ports.RoleLeader); len(cmds) != 0 {
		t.Fatalf("a viewer's retry relayed %+v", cmds)
	}

	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/site-calls/retry", api.SiteCallActionRequest{Keys: keys})
	res := decode[api.SiteCallActionResult](t, body)
	reasons := map[string]string{}
	for _, r := range res.Refused {
		reasons[r.ID] = r.Reason
	}
	if code != http.StatusOK || !slices.Equal(res.Requested, keys[:1]) || len(res.Refused) != 2 ||
		!strings.Contains(reasons[delivered], "is Delivered; only Parked") || !strings.Contains(reasons[unknown], "not known at central") {
		t.Fatalf("retry: %d %s", code, body)
	}
	d := e.siteCallDetail("plant-1", parked)
	if d.Status != ports.OpParked || d.Requested != ports.SiteRetry || d.RequestedBy != "token:cli-operator" || d.RequestedAt == nil ||
		len(d.Commands) != 1 || d.Commands[0].State != ports.CommandRequested || d.Commands[0].Actor != "token:cli-operator" {
		t.Fatalf("after the retry: %+v", d)
	}
	// A second request before the site reports is refused, naming the first.
	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/site-calls/discard", api.SiteCallActionRequest{Keys: keys[:1]})
	if res := decode[api.SiteCallActionResult](t, body); code != http.StatusOK || len(res.Requested) != 0 || len(res.Refused) != 1 ||
		!strings.Contains(res.Refused[0].Reason, "Retry requested by token:cli-operator") {
		t.Fatalf("discard while a retry is pending: %d %s", code, body)
	}

	// The site takes the command on its Sync, applies it and reports.
	cmds := e.siteSync("plant-1", "n1", ports.RoleLeader)
	if len(cmds) != 1 || cmds[0].OperationID != parked || cmds[0].Action != ports.SiteRetry || cmds[0].ID != d.Commands[0].ID {
		t.Fatalf("relayed %+v", cmds)
	}
	e.report("plant-1", siteOpAt(parked, ports.OpCall, ports.OpPending, 5, t0, t0.Add(time.Minute)))
	e.siteSync("plant-1", "n1", ports.RoleLeader, ports.CommandAnswer{ID: cmds[0].ID, State: ports.CommandApplied})
	d = e.siteCallDetail("plant-1", parked)
	if d.Status != ports.OpPending || d.Requested != "" || len(d.Commands) != 1 || d.Commands[0].State != ports.CommandApplied ||
		d.Commands[0].FinishedAt == nil {
		t.Fatalf("after the site's report: %+v", d)
	}
}

// TestSiteCallBulkRetryPinsTheCount: an operator counts the Parked rows of
// a filter at an instant, then retries by the filter with reported_to that
// instant: a row whose parking reaches central after the count is left
// alone, though the site parked it before. An action selecting nothing, or
// both keys and a filter, is refused.
func TestSiteCallBulkRetryPinsTheCount(t *testing.T) {
	e := newEnv(t)
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	a, b, later, elsewhere := newOpID(), newOpID(), newOpID(), newOpID()
	e.report("plant-1", siteOpAt(a, ports.OpCall, ports.OpParked, 2, t0, t0.Add(time.Minute)),
		siteOpAt(b, ports.OpWrite, ports.OpParked, 2, t0, t0.Add(2*time.Minute)))
	e.report("plant-2", siteOpAt(elsewhere, ports.OpCall, ports.OpParked, 2, t0, t0.Add(time.Minute)))

	countedAt := time.Now().UTC()
	pin := url.Values{"site": {"plant-1"}, "status": {"Parked"}, "reported_to": {countedAt.Format(time.RFC3339Nano)}}
	code, body := e.do(ports.RoleViewer, "GET", "/api/v1/site-calls/count?"+pin.Encode(), nil)
	if code != http.StatusOK || decode[api.Count](t, body).Count != 2 {
		t.Fatalf("count: %d %s", code, body)
	}
	// Another row, parked at the site before the count, reaches central
	// after it.
	waittest.For(t, 10*time.Second, "the clock past the count", func() (bool, string) {
		return time.Now().After(countedAt), ""
	})
	e.report("plant-1", siteOpAt(later, ports.OpCall, ports.OpParked, 3, t0, t0.Add(3*time.Minute)))

	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/site-calls/retry",
		api.SiteCallActionRequest{Filter: &api.SiteCallFilter{Site: "plant-1", ReportedTo: &countedAt}})
	res := decode[api.SiteCallActionResult](t, body)
	got := []string{}
	for _, k := range res.Requested {
		got = append(got, k.ID)
	}
	slices.Sort(got)
	want := []string{a, b}
	slices.Sort(want)
	if code != http.StatusOK || !slices.Equal(got, want) || len(res.Refused) != 0 {
		t.Fatalf("pinned retry: %d %s", code, body)
	}
	for id, requested := range map[string]bool{a: true, b: true, later: false} {
		if d := e.siteCallDetail("plant-1", id); (d.Requested == ports.SiteRetry) != requested {
			t.Errorf("%s: requested %q, want a retry %v", id, d.Requested, requested)
		}
	}
	if d := e.siteCallDetail("plant-2", elsewhere); d.Requested != "" {
		t.Errorf("another site's row was requested: %+v", d)
	}

	// all=true with no filter: every Parked row not already requested.
	code, body = e.do(ports.RoleOperator, "POST", "/api/v1/site-calls/discard", api.SiteCallActionRequest{All: true})
	res = decode[api.SiteCallActionResult](t, body)
	if code != http.StatusOK || len(res.Requested) != 2 || len(res.Refused) != 2 {
		t.Fatalf("discard all: %d %s", code, body)
	}

	for _, c := range []struct {
		req  api.SiteCallActionRequest
		want string
	}{
		{api.SiteCallActionRequest{}, "select site calls"},
		{api.SiteCallActionRequest{Filter: &api.SiteCallFilter{}}, "select site calls"},
		{api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant-1", ID: a}}, Filter: &api.SiteCallFilter{Site: "plant-1"}}, "not more than one"},
		{api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant-1", ID: a}}, All: true}, "not more than one"},
		{api.SiteCallActionRequest{Filter: &api.SiteCallFilter{Status: []ports.OpStatus{"Lost"}}}, "status \"Lost\" is unknown"},
		{api.SiteCallActionRequest{Filter: &api.SiteCallFilter{Kind: "Teleport"}}, "kind \"Teleport\" is unknown"},
	} {
		code, body := e.do(ports.RoleOperator, "POST", "/api/v1/site-calls/retry", c.req)
		if eb := decode[api.ErrorBody](t, body); code != http.StatusBadRequest || !strings.Contains(eb.Error.Message, c.want) {
			t.Errorf("retry %+v: %d %s, want 400 mentioning %q", c.req, code, body, c.want)
		}
	}
}

// TestSiteCallRoutesRefuseBadCallers attacks the new entrances: no
// credential, bad filter values, a malformed, oversize or cross-origin
// body; none of them relays anything.
func TestSiteCallRoutesRefuseBadCallers(t *testing.T) {
	e := newEnv(t)
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	parked := newOpID()
	e.report("plant-1", siteOpAt(parked, ports.OpCall, ports.OpParked, 2, t0, t0))
	retry := api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant-1", ID: parked}}}

	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/site-calls", nil}, {"GET", "/api/v1/site-calls/count", nil}, {"GET", "/api/v1/site-calls/kpis", nil},
		{"GET", "/api/v1/site-calls/plant-1/" + parked, nil}, {"POST", "/api/v1/site-calls/retry", retry},
		{"POST", "/api/v1/site-calls/discard", retry}, {"GET", "/api/v1/sites", nil}, {"GET", "/api/v1/sites/plant-1", nil},
	} {
		code, body := e.do("", r.method, r.path, r.body)
		if code != http.StatusUnauthorized || decode[api.ErrorBody](t, body).Error.Code != api.CodeUnauthenticated {
			t.Errorf("%s %s without a credential: %d %s", r.method, r.path, code, body)
		}
	}

	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/api/v1/site-calls?status=Lost", "", `status: unknown status "Lost"`},
		{"GET", "/api/v1/site-calls?kind=teleport", "", `kind: unknown kind "teleport"`},
		{"GET", "/api/v1/site-calls/count?from=yesterday", "", `from: "yesterday" is not a time`},
		{"GET", "/api/v1/site-calls?updated_to=soon", "", `updated_to: "soon" is not a time`},
		{"GET", "/api/v1/site-calls?limit=0", "", `limit: "0" is not a positive whole number`},
		{"GET", "/api/v1/site-calls?limit=5000", "", "page size 5000 is outside 1..1000"},
		{"GET", "/api/v1/site-calls?after=garbage", "", "cursor"},
		{"GET", "/api/v1/site-calls?site=" + strings.Repeat("x", 300), "", "over 200 bytes"},
		{"POST", "/api/v1/site-calls/retry", "{", "malformed JSON"},
		{"POST", "/api/v1/site-calls/retry", "", "needs a JSON body"},
		{"POST", "/api/v1/site-calls/retry", `{"keys":[],"extra":1}`, "unknown field"},
		{"POST", "/api/v1/site-calls/retry", `{"filter":{"updated_to":"soon"}}`, "malformed JSON"},
		{"POST", "/api/v1/site-calls/retry", `{"all":true} {"all":true}`, "more than one JSON value"},
	} {
		req := e.request(c.method, c.path, nil)
		if c.method == "POST" {
			req.Body = ioNopCloser(c.body)
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
		code, body := e.send(http.DefaultClient, req)
		eb := decode[api.ErrorBody](t, body)
		if code != http.StatusBadRequest || eb.Error.Code != api.CodeInvalid || !strings.Contains(eb.Error.Message, c.want) {
			t.Errorf("%s %s %s: %d %s, want 400 mentioning %q", c.method, c.path, c.body, code, body, c.want)
		}
	}

	// An oversize body is refused as such, unread past the limit.
	req := e.request("POST", "/api/v1/site-calls/retry", nil)
	req.Body = ioNopCloser(`{"keys":[{"site":"plant-1","id":"` + strings.Repeat("a", 2<<20) + `"}]}`)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleOperator])
	if code, body := e.send(http.DefaultClient, req); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversize body: %d %.200s", code, body)
	}
	// A body that is not JSON by its type.
	req = e.request("POST", "/api/v1/site-calls/retry", nil)
	req.Body = ioNopCloser("keys=x")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleOperator])
	if code, body := e.send(http.DefaultClient, req); code != http.StatusBadRequest || !strings.Contains(string(body), "must be JSON") {
		t.Errorf("form body: %d %s", code, body)
	}

	// A cross-origin POST from a logged-in operator's browser is refused.
	c := e.loginBrowser("operator")
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		req := e.request("POST", "/api/v1/site-calls/retry", retry)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if code, body := e.send(c, req); code != http.StatusForbidden || !strings.Contains(string(body), "cross-origin") {
			t.Errorf("cross-origin POST %v: %d %s", h, code, body)
		}
	}

	if d := e.siteCallDetail("plant-1", parked); d.Requested != "" || len(d.Commands) != 0 {
		t.Fatalf("a refused request relayed a command: %+v", d)
	}
	if cmds := e.siteSync("plant-1", "n1", ports.RoleLeader); len(cmds) != 0 {
		t.Fatalf("relayed %+v", cmds)
	}
}
