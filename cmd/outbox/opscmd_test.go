package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

const opsTestToken = "tok_cli-s3cr3t"

// opsReq is one request the canned API received.
type opsReq struct {
	Method, Path string
	Query        url.Values
	Auth         string
	Body         string
}

// opsAPI answers canned JSON per "METHOD /path" (the path after /api/v1)
// and records every request. Unknown routes answer 404 not_found.
type opsAPI struct {
	mu     sync.Mutex
	routes map[string]opsAnswer
	reqs   []opsReq
}

type opsAnswer struct {
	status int
	body   string
	// pages, when set, answers by the after parameter.
	pages map[string]string
}

func (a *opsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.reqs = append(a.reqs, opsReq{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(),
		Auth: r.Header.Get("Authorization"), Body: string(b)})
	ans, ok := a.routes[r.Method+" "+strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1")]
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
		return
	}
	body := ans.body
	if ans.pages != nil {
		body = ans.pages[r.URL.Query().Get("after")]
	}
	status := ans.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (a *opsAPI) requests() []opsReq {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]opsReq(nil), a.reqs...)
}

// opsEnv starts a canned API and returns it with the environment pointing
// the CLI at it.
func opsEnv(t *testing.T, routes map[string]opsAnswer) (*opsAPI, []string) {
	t.Helper()
	a := &opsAPI{routes: routes}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, []string{"OUTBOX_SERVER=" + srv.URL, "OUTBOX_TOKEN=" + opsTestToken, "TZ=UTC"}
}

type opsEntry func(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int

func opsRunCmd(entry opsEntry, environ []string, args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = entry(context.Background(), args, environ, &out, &errw)
	if strings.Contains(out.String()+errw.String(), opsTestToken) {
		panic("the token appeared in the output")
	}
	return code, out.String(), errw.String()
}

const opsPageJSON = `{"items":[
 {"id":"01950000-0000-7000-8000-000000000001","type":"email","list":"ops","subject":"Oven 3\u001b[31m too hot","priority":0,
  "status":"Parked","stuck":true,"retry_count":3,"source_site":"plant-1","created_at":"2026-03-01T10:00:00Z","updated_at":"2026-03-01T10:05:00Z"},
 {"id":"01950000-0000-7000-8000-000000000002","type":"webhook","list":"hooks","subject":"ok","priority":0,
  "status":"Delivered","stuck":false,"retry_count":0,"source_site":"plant-2","created_at":"2026-03-01T09:00:00Z"}],
 "next":"c2"}`

func TestOpsNotificationsFilterFlags(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{"GET /notifications": {body: opsPageJSON}})
	code, stdout, stderr := opsRunCmd(runNotifications, env, "list",
		"--status", "parked,retrying", "--status", "Parked", "--type", "email", "--site", "plant-1", "--list", "ops",
		"--from", "2026-03-01", "--to", "2026-03-02T12:30:00+02:00", "--updated-from", "2026-03-01T08:15",
		"--stuck", "--q", "oven", "--limit", "10", "--after", "c1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	reqs := a.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	want := url.Values{
		"status": {"Parked", "Retrying"}, "type": {"email"}, "site": {"plant-1"}, "list": {"ops"},
		"from": {"2026-03-01T00:00:00Z"}, "to": {"2026-03-02T10:30:00Z"}, "updated_from": {"2026-03-01T08:15:00Z"},
		"stuck": {"true"}, "q": {"oven"}, "limit": {"10"}, "after": {"c1"},
	}
	if !reflect.DeepEqual(r.Query, want) {
		t.Errorf("query\n%v\nwant\n%v", r.Query, want)
	}
	if r.Auth != "Bearer "+opsTestToken {
		t.Errorf("Authorization %q", r.Auth)
	}
	// The table: aligned columns, times in the local zone (TZ=UTC here),
	// the stuck mark, the escape sequence of the subject made harmless.
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("table:\n%s", stdout)
	}
	if col := strings.Index(lines[0], "STATUS"); col < 0 || lines[1][col:col+len("Parked (stuck)")] != "Parked (stuck)" ||
		!strings.HasPrefix(lines[2][col:], "Delivered") {
		t.Errorf("columns not aligned:\n%s", stdout)
	}
	for _, s := range []string{"2026-03-01 10:00:00", "2026-03-01 10:05:00", "Oven 3 [31m too hot", "plant-2"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("table lacks %q:\n%s", s, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("an escape character reached the terminal")
	}
	if !strings.Contains(stderr, "--after c2") {
		t.Errorf("stderr %q does not say how to get the next page", stderr)
	}
}

func TestOpsNotificationsLocalTimes(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{"GET /notifications/count": {body: `{"count":7}`},
		"GET /notifications": {body: opsPageJSON}})
	env = append([]string{"TZ=Asia/Tokyo"}, env...) // envValue takes the first
	code, stdout, stderr := opsRunCmd(runNotifications, env, "count", "--from", "2026-03-01T09:00")
	if code != exitOK || stdout != "7\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if got := a.requests()[0].Query.Get("from"); got != "2026-03-01T00:00:00Z" {
		t.Errorf("from %q: a zone-less time is read in the local zone", got)
	}
	_, stdout, _ = opsRunCmd(runNotifications, env, "list")
	if !strings.Contains(stdout, "2026-03-01 19:00:00") {
		t.Errorf("times not shown in the local zone:\n%s", stdout)
	}

	// A duration counts back from now.
	before := time.Now()
	opsRunCmd(runNotifications, env, "count", "--updated-from", "2h")
	got, err := time.Parse(time.RFC3339Nano, a.requests()[2].Query.Get("updated_from"))
	if err != nil || got.Before(before.Add(-2*time.Hour-time.Second)) || got.After(time.Now().Add(-2*time.Hour)) {
		t.Errorf("updated_from %v, want about 2h ago (%v)", got, err)
	}
}

func TestOpsNotificationsUsageErrors(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{})
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"list", "--status", "Lost"}, `--status: unknown status "Lost"`},
		{[]string{"list", "--from", "yesterday"}, `--from: "yesterday" is not a time`},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"list", "--limit", "-3"}, "--limit must be positive"},
		{[]string{"list", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"list", "--token", opsTestToken}, "never the token itself"},
		{[]string{"show"}, "give one notification id"},
		{[]string{"show", "a", "b"}, "give one notification id"},
		{[]string{"retry"}, "give the ids to retry, filters selecting them, or --all"},
		{[]string{"discard", "id1", "--site", "p"}, "not several"},
		{[]string{"discard", "--all", "--site", "p"}, "without filters"},
		{[]string{"retry", "--status", "Delivered", "--yes"}, "only Parked notifications can be retried"},
		{[]string{"frob"}, `outbox notifications: unknown command "frob"`},
		{[]string{"list", "--server", "ftp://x"}, "--server"},
		{[]string{"list", "--ca", "/nonexistent", "--server", "http://127.0.0.1:1"}, "--ca verifies an https server"},
		{[]string{"list", "--timeout", "0s"}, "--timeout must be positive"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := opsRunCmd(runNotifications, env, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.stderr) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tc.stderr)
			}
		})
	}
	if n := len(a.requests()); n != 0 {
		t.Errorf("%d requests sent for bad usage", n)
	}
}

func TestOpsNotificationsBulkConfirmation(t *testing.T) {
	routes := map[string]opsAnswer{
		"GET /notifications/count":    {body: `{"count":12}`},
		"POST /notifications/retry":   {body: `{"moved":["a","b"]}`},
		"POST /notifications/discard": {body: `{"moved":["a"],"refused":[{"id":"b","code":"conflict","message":"b is Delivered; only Parked notifications can be discarded"}]}`},
	}
	a, env := opsEnv(t, routes)

	// By filter without --yes: the count of the Parked rows it selects, and
	// nothing moves.
	code, stdout, stderr := opsRunCmd(runNotifications, env, "retry", "--site", "plant-1", "--status", "Parked,Pending")
	pin := regexp.MustCompile(`12 parked notifications match; repeat with --yes --updated-to (\S+) to retry them`).FindStringSubmatch(stderr)
	if code != exitUsage || pin == nil || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	reqs := a.requests()
	if len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != "/api/v1/notifications/count" ||
		!reflect.DeepEqual(reqs[0].Query, url.Values{"site": {"plant-1"}, "status": {"Parked"}, "updated_to": {pin[1]}}) {
		t.Fatalf("requests %+v", reqs)
	}
	// Repeating with what it printed acts on the rows it counted.
	if code, _, stderr := opsRunCmd(runNotifications, env, "retry", "--site", "plant-1", "--status", "Parked", "--yes", "--updated-to", pin[1]); code != exitOK {
		t.Fatalf("pinned retry: exit %d, %s", code, stderr)
	}
	reqs = a.requests()
	if last := reqs[len(reqs)-1]; last.Path != "/api/v1/notifications/retry" || !strings.Contains(last.Body, `"updated_to":"`+pin[1]+`"`) {
		t.Fatalf("pinned retry sent %+v", last)
	}

	// --all without --yes: the same rule.
	code, _, stderr = opsRunCmd(runNotifications, env, "discard", "--all")
	if code != exitUsage || !strings.Contains(stderr, "to discard them") || !strings.Contains(stderr, "--yes --updated-to ") {
		t.Fatalf("--all: exit %d, stderr %q", code, stderr)
	}

	// With --yes: the action, by filter, no count.
	code, stdout, stderr = opsRunCmd(runNotifications, env, "retry", "--site", "plant-1", "--yes")
	if code != exitOK || !strings.Contains(stdout, "retried 2 notifications") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	last := a.requests()[len(a.requests())-1]
	if last.Method != "POST" || last.Path != "/api/v1/notifications/retry" || !opsJSONEqual(t, last.Body, `{"filter":{"site":"plant-1"}}`) {
		t.Errorf("request %+v", last)
	}
	code, _, _ = opsRunCmd(runNotifications, env, "retry", "--all", "--yes")
	last = a.requests()[len(a.requests())-1]
	if code != exitOK || !opsJSONEqual(t, last.Body, `{"all":true}`) {
		t.Errorf("--all --yes: exit %d, body %s", code, last.Body)
	}

	// By ids: at once, no confirmation; a refusal is a failure.
	n := len(a.requests())
	code, stdout, stderr = opsRunCmd(runNotifications, env, "discard", "a", "b")
	if code != exitFailure || !strings.Contains(stdout, "discarded 1 notification") ||
		!strings.Contains(stdout, "b is Delivered") || !strings.Contains(stderr, "1 of 2 notifications refused") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	reqs = a.requests()[n:]
	if len(reqs) != 1 || reqs[0].Path != "/api/v1/notifications/discard" || !opsJSONEqual(t, reqs[0].Body, `{"ids":["a","b"]}`) {
		t.Errorf("requests %+v", reqs)
	}

	// Nothing parked matches: nothing to confirm.
	a.mu.Lock()
	a.routes["GET /notifications/count"] = opsAnswer{body: `{"count":0}`}
	a.mu.Unlock()
	code, stdout, _ = opsRunCmd(runNotifications, env, "retry", "--stuck")
	if code != exitOK || !strings.Contains(stdout, "nothing to retry") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

func opsJSONEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Errorf("%q: %v", a, err)
		return false
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestOpsNotificationsAllPagesAndJSON(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{"GET /notifications": {pages: map[string]string{
		"":   `{"items":[{"id":"n1","type":"email","list":"ops","subject":"one","priority":0,"status":"Pending","stuck":false,"retry_count":0}],"next":"p2"}`,
		"p2": `{"items":[{"id":"n2","type":"email","list":"ops","subject":"two","priority":0,"status":"Parked","stuck":false,"retry_count":1}]}`,
	}}})
	code, stdout, stderr := opsRunCmd(runNotifications, env, "list", "--all-pages", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var page struct {
		Items []struct{ ID string } `json:"items"`
		Next  string                `json:"next"`
	}
	if err := json.Unmarshal([]byte(stdout), &page); err != nil || len(page.Items) != 2 || page.Items[1].ID != "n2" || page.Next != "" {
		t.Errorf("page %+v (%v) from\n%s", page, err, stdout)
	}
	if !strings.Contains(stdout, "\n  \"items\": [") {
		t.Errorf("JSON not indented:\n%s", stdout)
	}
	if len(a.requests()) != 2 || a.requests()[1].Query.Get("after") != "p2" {
		t.Errorf("requests %+v", a.requests())
	}
}

func TestOpsNotificationsShow(t *testing.T) {
	detail := `{"id":"n1","type":"email","list":"ops","subject":"Oven","body":"line 1\nline 2\u001b]0;x","priority":2,
	"status":"Parked","stuck":false,"retry_count":3,"last_error":"550 mailbox unavailable","created_at":"2026-03-01T10:00:00Z",
	"history":[{"at":"2026-03-01T10:00:01Z","kind":"Attempted","actor":"dispatcher","outcome":"Permanent","duration_seconds":0.25,"error":"550"},
	           {"at":"2026-03-01T10:00:01Z","kind":"Parked","actor":"dispatcher","status":"Parked"}]}`
	a, env := opsEnv(t, map[string]opsAnswer{"GET /notifications/n1": {body: detail}})
	code, stdout, stderr := opsRunCmd(runNotifications, env, "show", "n1")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, s := range []string{"status:", "Parked", "last error:", "550 mailbox unavailable", "history:", "250ms",
		"Permanent", "body:\nline 1\nline 2\uFFFD]0;x"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	if strings.Contains(stdout, "next attempt:") {
		t.Errorf("empty fields are shown:\n%s", stdout)
	}
	code, stdout, _ = opsRunCmd(runNotifications, env, "show", "n1", "--json")
	var d map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &d) != nil || len(d["history"].([]any)) != 2 {
		t.Errorf("JSON: exit %d\n%s", code, stdout)
	}
	_ = a
}

func TestOpsKPI(t *testing.T) {
	_, env := opsEnv(t, map[string]opsAnswer{"GET /kpis": {body: `{"at":"2026-03-01T10:00:00Z","window_seconds":3600,
	"global":{"queue_depth":15,"stuck":1,"parked":2,"delivered":90,"oldest_pending_age_seconds":192},
	"sites":[{"site":"plant-1","queue_depth":5,"stuck":1,"parked":2,"delivered":40,"oldest_pending_age_seconds":192},
	         {"site":"plant-2","queue_depth":10,"stuck":0,"parked":0,"delivered":50,"oldest_pending_age_seconds":0}]}`}})
	code, stdout, stderr := opsRunCmd(runKPI, env)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, s := range []string{"KPIs at 2026-03-01 10:00:00", "queue depth:", "delivered (last 1h):", "oldest pending:", "3m12s",
		"SITE", "OLDEST PENDING", "plant-2"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	if !regexpLine(stdout, `plant-1\s+5\s+1\s+2\s+40\s+3m12s`) || !regexpLine(stdout, `plant-2\s+10\s+0\s+0\s+50\s+-`) {
		t.Errorf("site rows:\n%s", stdout)
	}
	code, stdout, _ = opsRunCmd(runKPI, env, "--json")
	var rep map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep["global"].(map[string]any)["queue_depth"] != 15.0 {
		t.Errorf("JSON: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := opsRunCmd(runKPI, env, "extra"); code != exitUsage || !strings.Contains(stderr, "unexpected argument") {
		t.Errorf("extra argument: exit %d %q", code, stderr)
	}
}

func regexpLine(text, pattern string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		if ok, _ := regexp.MatchString(pattern, line); ok {
			return true
		}
	}
	return false
}

func TestOpsListsTableJSONAndPut(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"GET /lists":          {body: `[{"name":"ops","type":"email","targets":["a@example.com","b@example.com"]},{"name":"hooks-long-name","type":"webhook","targets":[]}]`},
		"PUT /lists/ops%20b":  {body: `{"name":"ops b","type":"email","targets":["a@example.com","b@example.com"]}`},
		"DELETE /lists/ops":   {status: http.StatusNoContent},
		"GET /lists/missing":  {status: 404, body: `{"error":{"code":"not_found","message":"list \"missing\" not found"}}`},
		"PUT /lists/fromfile": {body: `{"name":"fromfile","type":"webhook","targets":["https://h"]}`},
	})
	code, stdout, _ := opsRunCmd(runLists, env, "list")
	want := "NAME             TYPE     TARGETS\nops              email    2\nhooks-long-name  webhook  0\n"
	if code != exitOK || stdout != want {
		t.Errorf("table:\n%q\nwant\n%q", stdout, want)
	}
	code, stdout, _ = opsRunCmd(runLists, env, "list", "--json")
	var ls []map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &ls) != nil || len(ls) != 2 || ls[0]["name"] != "ops" ||
		!strings.HasPrefix(stdout, "[\n  {\n    \"name\"") {
		t.Errorf("JSON:\n%s", stdout)
	}

	// The name before the flags, targets repeated.
	code, stdout, stderr := opsRunCmd(runLists, env, "put", "ops b", "--type", "email", "--target", "a@example.com", "--target", "b@example.com")
	if code != exitOK || !strings.Contains(stdout, "targets:  2") || !strings.Contains(stdout, "  b@example.com") {
		t.Errorf("put: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	last := a.requests()[len(a.requests())-1]
	if last.Method != "PUT" || last.Path != "/api/v1/lists/ops%20b" ||
		!opsJSONEqual(t, last.Body, `{"name":"ops b","type":"email","targets":["a@example.com","b@example.com"]}`) {
		t.Errorf("request %+v", last)
	}

	// From a file; the file's name must agree with the command's.
	dir := t.TempDir()
	file := filepath.Join(dir, "l.json")
	if err := os.WriteFile(file, []byte(`{"type":"webhook","targets":["https://h"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := opsRunCmd(runLists, env, "put", "fromfile", "--file", file); code != exitOK {
		t.Errorf("put --file: exit %d %s", code, stderr)
	}
	last = a.requests()[len(a.requests())-1]
	if last.Path != "/api/v1/lists/fromfile" || !opsJSONEqual(t, last.Body, `{"name":"fromfile","type":"webhook","targets":["https://h"]}`) {
		t.Errorf("request %+v", last)
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"other","type":"email","targets":[],"tragets":[]}`), 0o600)
	n := len(a.requests())
	for _, args := range [][]string{
		{"put", "fromfile", "--file", bad},
		{"put", "x", "--file", file, "--type", "email"},
		{"put", "--type", "email"},
		{"show"},
		{"delete", "a", "b"},
	} {
		if code, _, stderr := opsRunCmd(runLists, env, args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	if len(a.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}

	if code, stdout, _ := opsRunCmd(runLists, env, "delete", "ops"); code != exitOK || stdout != "deleted list ops\n" {
		t.Errorf("delete: exit %d %q", code, stdout)
	}
	code, stdout, stderr = opsRunCmd(runLists, env, "show", "missing")
	if code != exitFailure || stdout != "" || stderr != "outbox lists show: not_found: list \"missing\" not found\n" {
		t.Errorf("not found: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestOpsChannelsPut(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"PUT /channels/email": {body: `{"type":"email","settings":{"host":"smtp.example.com","password":"env:SMTP_PW"},"retry":{"backoff":"exponential","max_retries":5,"interval_seconds":30,"max_interval_seconds":3600},"rate_limit":2.5}`},
		"GET /channels":       {body: `[{"type":"email","settings":{"host":"h","port":"25"},"retry":{"max_retries":5,"interval_seconds":192}},{"type":"slack","settings":{},"retry":{}}]`},
	})
	code, stdout, stderr := opsRunCmd(runChannels, env, "put", "email", "--set", "host=smtp.example.com", "--set", "password=env:SMTP_PW",
		"--backoff", "exponential", "--max-retries", "5", "--interval", "30s", "--max-interval", "1h", "--rate-limit", "2.5")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	last := a.requests()[len(a.requests())-1]
	if !opsJSONEqual(t, last.Body, `{"type":"email","settings":{"host":"smtp.example.com","password":"env:SMTP_PW"},
		"retry":{"backoff":"exponential","max_retries":5,"interval_seconds":30,"max_interval_seconds":3600},"rate_limit":2.5}`) {
		t.Errorf("body %s", last.Body)
	}
	for _, s := range []string{"backoff:", "exponential", "max interval:", "1h", "2.5/s", "password", "= env:SMTP_PW"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	_, stdout, _ = opsRunCmd(runChannels, env, "list")
	if !regexpLine(stdout, `^email\s+fixed\s+5\s+3m12s\s+default\s+none\s+host,port$`) {
		t.Errorf("list:\n%s", stdout)
	}
	for _, args := range [][]string{
		{"put", "email", "--set", "novalue"},
		{"put", "email", "--set", "a=1", "--set", "a=2"},
		{"put", "email", "--file", "x.json", "--max-retries", "3"},
		{"put"},
	} {
		if code, _, stderr := opsRunCmd(runChannels, env, args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

func TestOpsUsersPassword(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"PUT /users/bob": {body: `{"name":"bob","role":"operator"}`},
		"GET /users":     {body: `[{"name":"ann","role":"admin","created_at":"2026-03-01T10:00:00Z"}]`},
		// What central answers for a new user without a password.
		"PUT /users/alice": {status: http.StatusBadRequest, body: `{"error":{"code":"invalid","message":"invalid: password: required for a new user"}}`},
	})
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := usersCmd(context.Background(), args, env, strings.NewReader(stdin), &out, &errw)
		return code, out.String(), errw.String()
	}
	code, stdout, stderr := run("pa ss\n", "put", "bob", "--role", "operator", "--password-stdin")
	if code != exitOK || !strings.Contains(stdout, "operator") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	last := a.requests()[len(a.requests())-1]
	if !opsJSONEqual(t, last.Body, `{"role":"operator","password":"pa ss"}`) {
		t.Errorf("body %s", last.Body)
	}
	if strings.Contains(stdout+stderr, "pa ss") {
		t.Errorf("the password was printed")
	}
	// No --password-stdin and no terminal: a role change only.
	if code, _, stderr := run("ignored\n", "put", "bob", "--role", "operator"); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	last = a.requests()[len(a.requests())-1]
	if !opsJSONEqual(t, last.Body, `{"role":"operator"}`) {
		t.Errorf("body %s", last.Body)
	}
	// A password piped in without --password-stdin: central's refusal,
	// and why the password was not read.
	code, _, stderr = run("alice's password\n", "put", "alice", "--role", "viewer")
	if code != exitFailure || !strings.Contains(stderr, "password: required for a new user") ||
		!strings.Contains(stderr, "standard input is not a terminal, so no password was asked for; give --password-stdin to read it from standard input") {
		t.Fatalf("a piped password without --password-stdin: exit %d, stderr %q", code, stderr)
	}
	n := len(a.requests())
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"put", "bob", "--role", "operator", "--password-stdin"}},
		{"x\n", []string{"put", "bob", "--role", "root", "--password-stdin"}},
		{"x\n", []string{"put", "bob", "--password", "x"}},
		{"", []string{"put", "--role", "admin"}},
	} {
		if code, _, stderr := run(tc.stdin, tc.args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
	}
	if len(a.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}
	_, stdout, _ = run("", "list")
	if !regexpLine(stdout, `^ann\s+admin\s+2026-03-01 10:00:00\s+-$`) {
		t.Errorf("list:\n%s", stdout)
	}
}

func TestOpsTokens(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{
		"POST /tokens":      {status: http.StatusCreated, body: `{"id":"t1","name":"ci","role":"operator","secret":"obx_t1_SECRETPART"}`},
		"GET /tokens":       {body: `[{"id":"t1","name":"ci","role":"operator"}]`},
		"DELETE /tokens/t1": {status: http.StatusNoContent},
	})
	code, stdout, stderr := opsRunCmd(runTokens, env, "create", "ci", "--role", "operator")
	if code != exitOK || !strings.Contains(stdout, "obx_t1_SECRETPART") || !strings.Contains(stderr, "cannot be shown again") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if last := a.requests()[len(a.requests())-1]; !opsJSONEqual(t, last.Body, `{"name":"ci","role":"operator"}`) {
		t.Errorf("body %s", last.Body)
	}
	code, stdout, stderr = opsRunCmd(runTokens, env, "create", "ci", "--role", "operator", "--json")
	var ct map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &ct) != nil || ct["secret"] != "obx_t1_SECRETPART" ||
		!strings.Contains(stderr, "cannot be shown again") {
		t.Errorf("JSON: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := opsRunCmd(runTokens, env, "list"); code != exitOK || !regexpLine(stdout, `^t1\s+ci\s+operator\s+-\s+-\s+never$`) {
		t.Errorf("list: %d\n%s", code, stdout)
	}
	if code, stdout, _ := opsRunCmd(runTokens, env, "delete", "t1", "--json"); code != exitOK || stdout != "" {
		t.Errorf("delete --json: %d %q", code, stdout)
	}
	if code, _, stderr := opsRunCmd(runTokens, env, "create", "ci"); code != exitUsage || !strings.Contains(stderr, "--role") {
		t.Errorf("no role: %d %q", code, stderr)
	}
}

func TestOpsTokenSources(t *testing.T) {
	a, env := opsEnv(t, map[string]opsAnswer{"GET /kpis": {body: `{"at":"2026-03-01T10:00:00Z","global":{},"sites":[]}`}})
	server := env[0]
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := func(environ []string, args ...string) string {
		t.Helper()
		if code, _, stderr := opsRunCmd(runKPI, environ, args...); code != exitOK {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		r := a.requests()
		return r[len(r)-1].Auth
	}
	if got := auth(env, "--token-file", file); got != "Bearer from-file" {
		t.Errorf("--token-file: %q", got)
	}
	if got := auth([]string{server, "OUTBOX_TOKEN=file:" + file}); got != "Bearer from-file" {
		t.Errorf("OUTBOX_TOKEN reference: %q", got)
	}
	if got := auth([]string{server}, "--token", "file:"+file); got != "Bearer from-file" {
		t.Errorf("--token reference: %q", got)
	}
	if got := auth(env); got != "Bearer "+opsTestToken {
		t.Errorf("OUTBOX_TOKEN: %q", got)
	}
	if code, _, stderr := opsRunCmd(runKPI, env, "--token-file", filepath.Join(dir, "none")); code != exitUsage ||
		!strings.Contains(stderr, "--token-file") {
		t.Errorf("missing token file: %d %q", code, stderr)
	}
}

func TestOpsServerErrors(t *testing.T) {
	_, env := opsEnv(t, map[string]opsAnswer{
		"POST /notifications/retry": {status: http.StatusForbidden, body: `{"error":{"code":"forbidden","message":"the viewer role cannot retry"}}`},
		"GET /kpis":                 {status: http.StatusUnauthorized, body: `{"error":{"code":"unauthenticated","message":"no credential"}}`},
	})
	code, stdout, stderr := opsRunCmd(runNotifications, env, "retry", "id1")
	if code != exitFailure || stdout != "" || stderr != "outbox notifications retry: forbidden: the viewer role cannot retry\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// No token at all: a hint.
	code, _, stderr = opsRunCmd(runKPI, []string{env[0]})
	if code != exitFailure || !strings.Contains(stderr, "unauthenticated: no credential") || !strings.Contains(stderr, "set OUTBOX_TOKEN") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	// Unreachable.
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	code, _, stderr = opsRunCmd(runLists, []string{"OUTBOX_SERVER=" + srv.URL, "OUTBOX_TOKEN=" + opsTestToken}, "list")
	if code != exitFailure || !strings.Contains(stderr, "outbox lists list: GET /api/v1/lists: unavailable") {
		t.Errorf("unreachable: exit %d, stderr %q", code, stderr)
	}
}

func TestOpsHelp(t *testing.T) {
	for name, entry := range map[string]opsEntry{"notifications": runNotifications, "kpi": runKPI, "lists": runLists,
		"channels": runChannels, "users": runUsers, "tokens": runTokens} {
		code, stdout, stderr := opsRunCmd(entry, nil, "help")
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: outbox "+name) || !strings.Contains(stdout, "--token-file") || stderr != "" {
			t.Errorf("%s help: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
		}
		if name == "kpi" {
			continue
		}
		code, stdout, stderr = opsRunCmd(entry, nil)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "Usage: outbox "+name) {
			t.Errorf("%s without a command: exit %d, stderr %q", name, code, stderr)
		}
	}
	if code, _, stderr := opsRunCmd(runLists, nil, "put", "-h"); code != exitOK || !strings.Contains(stderr, "-target") {
		t.Errorf("put -h: %d %q", code, stderr)
	}
}

func TestOpsDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 4200 * time.Millisecond: "4.2s", 42 * time.Second: "42s",
		192 * time.Second: "3m12s", 3 * time.Minute: "3m", 2*time.Hour + 5*time.Minute + 10*time.Second: "2h5m",
		time.Hour: "1h", 76 * time.Hour: "3d4h", 48 * time.Hour: "2d", 59*time.Minute + 50*time.Second: "1h",
	} {
		if got := opsDuration(d); got != want {
			t.Errorf("opsDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
