package httpapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/ports"
)

// TestClientAgainstTheServer runs the CLI's Go client against the real
// server: every method once, and the server's refusals surfacing as the
// ports' sentinel errors.
func TestClientAgainstTheServer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	parked := e.submit("bad", "p1", "p2")
	delivered := e.submit("ok", "d1")
	e.waitStatus(ports.StatusParked, parked...)
	e.waitStatus(ports.StatusDelivered, delivered...)
	admin, err := client.New(e.srv.URL, e.tokens[ports.RoleAdmin])
	if err != nil {
		t.Fatal(err)
	}
	viewer, _ := client.New(e.srv.URL, e.tokens[ports.RoleViewer])
	nobody, _ := client.New(e.srv.URL, "")

	if me, err := viewer.Me(ctx); err != nil || me.Role != ports.RoleViewer {
		t.Fatalf("me: %+v %v", me, err)
	}
	if _, err := nobody.KPIs(ctx); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	page, err := viewer.Notifications(ctx, api.Filter{Status: []ports.Status{ports.StatusParked}}, 1, "")
	if err != nil || len(page.Items) != 1 || page.Next == "" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	page2, err := viewer.Notifications(ctx, api.Filter{Status: []ports.Status{ports.StatusParked}}, 1, page.Next)
	if err != nil || len(page2.Items) != 1 || page2.Items[0].ID == page.Items[0].ID {
		t.Fatalf("second page: %+v %v", page2, err)
	}
	if n, err := viewer.Count(ctx, api.Filter{List: "bad"}); err != nil || n != 2 {
		t.Fatalf("count: %d %v", n, err)
	}
	if d, err := viewer.Notification(ctx, delivered[0]); err != nil || d.Status != ports.StatusDelivered || len(d.History) < 2 {
		t.Fatalf("detail: %+v %v", d, err)
	}
	if _, err := viewer.Retry(ctx, api.ActionRequest{IDs: parked}); !errors.Is(err, ports.ErrForbidden) {
		t.Fatalf("viewer retry: %v", err)
	}
	if _, err := viewer.Notifications(ctx, api.Filter{Q: string(make([]byte, 300))}, 0, ""); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("bad filter: %v", err)
	}
	if res, err := admin.Discard(ctx, api.ActionRequest{Filter: &api.Filter{List: "bad"}}); err != nil || len(res.Moved) != 2 {
		t.Fatalf("discard: %+v %v", res, err)
	}
	if k, err := viewer.KPIs(ctx); err != nil || k.Global.Parked != 0 || len(k.Sites) != 1 || k.Sites[0].Site != "plant-1" {
		t.Fatalf("kpis: %+v %v", k, err)
	}

	if _, err := admin.PutList(ctx, api.List{Name: "l1", Type: "email", Targets: []string{"a@example.com"}}); err != nil {
		t.Fatal(err)
	}
	if l, err := viewer.List(ctx, "l1"); err != nil || l.Targets[0] != "a@example.com" {
		t.Fatalf("list: %+v %v", l, err)
	}
	if ls, err := viewer.Lists(ctx); err != nil || len(ls) != 3 {
		t.Fatalf("lists: %+v %v", ls, err)
	}
	if err := admin.DeleteList(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.List(ctx, "l1"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("deleted list: %v", err)
	}
	ch := api.Channel{Type: "email", Settings: map[string]string{"host": "smtp.example.com"},
		Retry: api.Retry{Backoff: ports.BackoffExponential, MaxRetries: 5, IntervalSeconds: 30}}
	if got, err := admin.PutChannel(ctx, ch); err != nil || got.Retry.IntervalSeconds != 30 || got.Retry.Backoff != ports.BackoffExponential {
		t.Fatalf("put channel: %+v %v", got, err)
	}
	if got, err := admin.Channel(ctx, "email"); err != nil || got.Settings["host"] != "smtp.example.com" {
		t.Fatalf("channel: %+v %v", got, err)
	}
	// A viewer sees the channel's type, retry and rate, not its settings.
	if got, err := viewer.Channel(ctx, "email"); err != nil || len(got.Settings) != 0 || !got.SettingsHidden || got.Retry.MaxRetries != 5 {
		t.Fatalf("channel as a viewer: %+v %v", got, err)
	}
	if cs, err := viewer.Channels(ctx); err != nil || len(cs) != 1 {
		t.Fatalf("channels: %+v %v", cs, err)
	}
	if err := admin.DeleteChannel(ctx, "email"); err != nil {
		t.Fatal(err)
	}

	if _, err := admin.PutUser(ctx, "dora", api.PutUser{Role: ports.RoleOperator, Password: "dora's password"}); err != nil {
		t.Fatal(err)
	}
	if us, err := admin.Users(ctx); err != nil || len(us) != 4 {
		t.Fatalf("users: %+v %v", us, err)
	}
	if err := admin.DeleteUser(ctx, "dora"); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CreateToken(ctx, api.NewToken{Name: "made", Role: ports.RoleOperator})
	if err != nil || tok.Secret == "" {
		t.Fatalf("create token: %+v %v", tok, err)
	}
	if ts, err := admin.Tokens(ctx); err != nil || len(ts) != 4 {
		t.Fatalf("tokens: %+v %v", ts, err)
	}
	if err := admin.DeleteToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteToken(ctx, tok.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestClientSiteCallsAgainstTheServer runs the client's site-call and site
// methods against the real server: reads, an operator's relayed Retry, a
// viewer's refused one, and an unknown site or row as ErrNotFound.
func TestClientSiteCallsAgainstTheServer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	parked, pending := newOpID(), newOpID()
	e.report("plant/1", siteOpAt(parked, ports.OpCall, ports.OpParked, 3, t0, t0), siteOpAt(pending, ports.OpWrite, ports.OpPending, 1, t0, t0))
	e.siteSync("plant/1", "n1", ports.RoleLeader)
	operator, _ := client.New(e.srv.URL, e.tokens[ports.RoleOperator])
	viewer, _ := client.New(e.srv.URL, e.tokens[ports.RoleViewer])

	page, err := viewer.SiteCalls(ctx, api.SiteCallFilter{Site: "plant/1"}, 1, "")
	if err != nil || len(page.Items) != 1 || page.Next == "" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	page2, err := viewer.SiteCalls(ctx, api.SiteCallFilter{Site: "plant/1"}, 1, page.Next)
	if err != nil || len(page2.Items) != 1 || page2.Items[0].ID == page.Items[0].ID {
		t.Fatalf("second page: %+v %v", page2, err)
	}
	if n, err := viewer.CountSiteCalls(ctx, api.SiteCallFilter{Kind: ports.OpWrite}); err != nil || n != 1 {
		t.Fatalf("count: %d %v", n, err)
	}
	if k, err := viewer.SiteCallKPIs(ctx); err != nil || len(k) != 1 || k[0].Parked != 1 || k[0].Pending != 1 {
		t.Fatalf("kpis: %+v %v", k, err)
	}
	if _, err := viewer.RetrySiteCalls(ctx, api.SiteCallActionRequest{All: true}); !errors.Is(err, ports.ErrForbidden) {
		t.Fatalf("viewer retry: %v", err)
	}
	res, err := operator.RetrySiteCalls(ctx, api.SiteCallActionRequest{Keys: []api.SiteCallKey{{Site: "plant/1", ID: parked}, {Site: "plant/1", ID: pending}}})
	if err != nil || len(res.Requested) != 1 || res.Requested[0].ID != parked || len(res.Refused) != 1 || res.Refused[0].ID != pending {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if _, err := operator.DiscardSiteCalls(ctx, api.SiteCallActionRequest{}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("discard of nothing: %v", err)
	}
	d, err := viewer.SiteCall(ctx, "plant/1", parked)
	if err != nil || d.Requested != ports.SiteRetry || d.RequestedBy != "token:cli-operator" || len(d.Commands) != 1 {
		t.Fatalf("detail: %+v %v", d, err)
	}
	if _, err := viewer.SiteCall(ctx, "plant/1", newOpID()); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("unknown row: %v", err)
	}
	sites, err := viewer.Sites(ctx)
	if err != nil || len(sites) != 1 || sites[0].Site != "plant/1" || sites[0].Leader != "n1" || sites[0].State != ports.SiteConnected {
		t.Fatalf("sites: %+v %v", sites, err)
	}
	if s, err := viewer.Site(ctx, "plant/1"); err != nil || len(s.Nodes) != 1 || s.Calls.Parked != 1 {
		t.Fatalf("site: %+v %v", s, err)
	}
	if _, err := viewer.Site(ctx, "plant-9"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("unknown site: %v", err)
	}
}
