package opscli

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
)

// seed gives c a Parked notification from plant-1 whose subject carries a
// terminal escape, a Delivered one from plant-2, and a Pending one from
// plant-1 that is stuck: the clock is 15 minutes on.
func seed(c *testCentral) (parked, delivered, stuck string) {
	c.t.Helper()
	parked = c.submit("bad", "plant-1", "Oven 3\x1b[31m too hot")[0]
	delivered = c.submit("hooks", "plant-2", "ok")[0]
	c.dispatch()
	stuck = c.submit("ok", "plant-1", "waiting")[0]
	c.clock.Advance(15 * time.Minute)
	return parked, delivered, stuck
}

func TestOpsNotificationsFilterFlags(t *testing.T) {
	c := newTestCentral(t)
	seed(c)
	code, _, stderr := runCmd(t, Notifications, c.environ(), "", "list",
		"--status", "parked,retrying", "--status", "Parked", "--type", "email", "--site", "plant-1", "--list", "bad",
		"--from", "2026-03-01", "--to", "2026-03-02T12:30:00+02:00", "--updated-from", "2026-03-01T08:15",
		"--q", "oven", "--limit", "10")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	r := c.last()
	want := url.Values{
		"status": {"Parked", "Retrying"}, "type": {"email"}, "site": {"plant-1"}, "list": {"bad"},
		"from": {"2026-03-01T00:00:00Z"}, "to": {"2026-03-02T10:30:00Z"}, "updated_from": {"2026-03-01T08:15:00Z"},
		"q": {"oven"}, "limit": {"10"},
	}
	if !reflect.DeepEqual(r.Query, want) || r.Auth != "Bearer "+c.tokens[ports.RoleAdmin] {
		t.Errorf("query\n%v\nwant\n%v\n(auth %q)", r.Query, want, r.Auth)
	}

	// The table: aligned columns, times in the local zone (TZ=UTC here),
	// the stuck mark, the escape sequence of the subject made harmless.
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "list", "--limit", "2")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("table:\n%s", stdout)
	}
	if col := strings.Index(lines[0], "STATUS"); col < 0 || !strings.HasPrefix(lines[1][col:], "Pending (stuck)") ||
		!strings.HasPrefix(lines[2][col:], "Delivered") {
		t.Errorf("columns not aligned, or no stuck mark:\n%s", stdout)
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("an escape character reached the terminal")
	}
	if !strings.Contains(stdout, "2026-03-01 10:00:00") || !strings.Contains(stdout, "plant-2") {
		t.Errorf("table lacks the times or the site:\n%s", stdout)
	}
	if !regexp.MustCompile(`repeat with -after \S+ \(or -all-pages\)`).MatchString(stderr) {
		t.Errorf("stderr %q does not say how to get the next page", stderr)
	}
	_, stdout, _ = runCmd(t, Notifications, c.environ(), "", "list", "--status", "Parked")
	if !strings.Contains(stdout, "Oven 3 [31m too hot") || strings.Contains(stdout, "\x1b") {
		t.Errorf("the subject's escape not made harmless:\n%q", stdout)
	}
}

func TestOpsNotificationsLocalTimes(t *testing.T) {
	c := newTestCentral(t)
	seed(c)
	env := append([]string{"TZ=Asia/Tokyo"}, c.environ()...) // the first one counts
	code, stdout, stderr := runCmd(t, Notifications, env, "", "count", "--from", "2026-03-01T09:00")
	if code != exitOK || stdout != "3\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if got := c.last().Query.Get("from"); got != "2026-03-01T00:00:00Z" {
		t.Errorf("from %q: a zone-less time is read in the local zone", got)
	}
	if _, stdout, _ = runCmd(t, Notifications, env, "", "count", "--from", "2026-03-01T19:01"); stdout != "0\n" {
		t.Errorf("count from after the notifications, Tokyo time: %q", stdout)
	}
	_, stdout, _ = runCmd(t, Notifications, env, "", "list")
	if !strings.Contains(stdout, "2026-03-01 19:00:00") {
		t.Errorf("times not shown in the local zone:\n%s", stdout)
	}

	// A duration counts back from now.
	before := time.Now()
	runCmd(t, Notifications, env, "", "count", "--updated-from", "2h")
	got, err := time.Parse(time.RFC3339Nano, c.last().Query.Get("updated_from"))
	if err != nil || got.Before(before.Add(-2*time.Hour-time.Second)) || got.After(time.Now().Add(-2*time.Hour)) {
		t.Errorf("updated_from %v, want about 2h ago (%v)", got, err)
	}
}

func TestOpsNotificationsUsageErrors(t *testing.T) {
	c := newTestCentral(t)
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"list", "--status", "Lost"}, `-status: unknown status "Lost"`},
		{[]string{"list", "--from", "yesterday"}, `-from: "yesterday" is not a time`},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"list", "--limit", "-3"}, "-limit must be positive"},
		{[]string{"list", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"list", "--token", c.tokens[ports.RoleAdmin]}, "never the token itself"},
		{[]string{"show"}, "give one notification id"},
		{[]string{"show", "a", "b"}, "give one notification id"},
		{[]string{"retry"}, "give the ids to retry, filters selecting them, or -all"},
		{[]string{"discard", "id1", "--site", "p"}, "not several"},
		{[]string{"discard", "--all", "--site", "p"}, "without filters"},
		{[]string{"retry", "--status", "Delivered", "--yes"}, "only Parked notifications can be retried"},
		{[]string{"frob"}, `outbox notifications: unknown command "frob"`},
		{[]string{"list", "--server", "ftp://x"}, "-server"},
		{[]string{"list", "--ca", "/nonexistent", "--server", "http://127.0.0.1:1"}, "-ca verifies an https server"},
		{[]string{"list", "--timeout", "0s"}, "-timeout must be positive"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.stderr) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tc.stderr)
			}
		})
	}
	if n := len(c.requests()); n != 0 {
		t.Errorf("%d requests sent for bad usage", n)
	}
}

func TestOpsNotificationsBulkConfirmation(t *testing.T) {
	c := newTestCentral(t)
	parked := c.submit("bad", "plant-1", "a", "b", "c")
	delivered := c.submit("ok", "plant-1", "d")[0]
	c.submit("bad", "plant-2", "e")
	c.dispatch()

	// By filter without --yes: the count of the Parked rows it selects, and
	// nothing moves.
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "retry", "--site", "plant-1", "--status", "Parked,Pending")
	pin := regexp.MustCompile(`3 parked notifications match; repeat with -yes -updated-to (\S+) to retry them`).FindStringSubmatch(stderr)
	if code != exitPreview || pin == nil || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	reqs := c.requests()
	if len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != "/api/v1/notifications/count" ||
		!reflect.DeepEqual(reqs[0].Query, url.Values{"site": {"plant-1"}, "status": {"Parked"}}) {
		t.Fatalf("requests %+v", reqs)
	}
	if st := c.status(parked[0]); st != ports.StatusParked {
		t.Fatalf("a count moved %s to %s", parked[0], st)
	}
	// Repeating with what it printed acts on the rows it counted.
	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "retry", "--site", "plant-1", "--status", "Parked", "--yes", "--updated-to", pin[1])
	if code != exitOK || !strings.Contains(stdout, "retried 3 notifications") {
		t.Fatalf("pinned retry: exit %d, %s%s", code, stdout, stderr)
	}
	if last := c.last(); last.Path != "/api/v1/notifications/retry" || !strings.Contains(last.Body, `"updated_to":"`+pin[1]+`"`) {
		t.Fatalf("pinned retry sent %+v", last)
	}
	for _, id := range parked {
		if st := c.status(id); st != ports.StatusPending {
			t.Errorf("%s is %s after the retry, want Pending", id, st)
		}
	}
	c.dispatch() // they park again

	// --all without --yes: the same rule.
	code, _, stderr = runCmd(t, Notifications, c.environ(), "", "discard", "--all")
	if code != exitPreview || !strings.Contains(stderr, "4 parked notifications match") || !strings.Contains(stderr, "to discard them") {
		t.Fatalf("--all: exit %d, stderr %q", code, stderr)
	}

	// With --yes: the action, by filter, no count.
	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "retry", "--site", "plant-1", "--yes")
	if code != exitOK || !strings.Contains(stdout, "retried 3 notifications") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if last := c.last(); last.Method != "POST" || last.Path != "/api/v1/notifications/retry" || !jsonEqual(t, last.Body, `{"filter":{"site":"plant-1"}}`) {
		t.Errorf("request %+v", last)
	}
	c.dispatch()
	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "retry", "--all", "--yes")
	if code != exitOK || !strings.Contains(stdout, "retried 4 notifications") || !jsonEqual(t, c.last().Body, `{"all":true}`) {
		t.Errorf("--all --yes: exit %d, stdout %q, body %s", code, stdout, c.last().Body)
	}
	c.dispatch()

	// By ids: at once, no confirmation; a refusal is a failure.
	n := len(c.requests())
	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "discard", parked[0], delivered)
	if code != exitFailure || !strings.Contains(stdout, "discarded 1 notification\n") ||
		!regexpLine(stdout, delivered+`\s+conflict\s+.*Delivered`) || !strings.Contains(stderr, "1 of 2 notifications refused") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	reqs = c.requests()[n:]
	if len(reqs) != 1 || reqs[0].Path != "/api/v1/notifications/discard" || !jsonEqual(t, reqs[0].Body, `{"ids":["`+parked[0]+`","`+delivered+`"]}`) {
		t.Errorf("requests %+v", reqs)
	}
	if st := c.status(parked[0]); st != ports.StatusDiscarded {
		t.Errorf("%s is %s, want Discarded", parked[0], st)
	}

	// Nothing parked matches: nothing to confirm.
	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "retry", "--stuck")
	if code != exitOK || !strings.Contains(stdout, "nothing to retry") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
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

func regexpLine(text, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for line := range strings.SplitSeq(text, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}

func TestOpsNotificationsAllPagesAndJSON(t *testing.T) {
	c := newTestCentral(t)
	ids := c.submit("ok", "plant-1", "one", "two")
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "list", "--all-pages", "--json", "--limit", "1")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var page struct {
		Items []struct{ ID string } `json:"items"`
		Next  string                `json:"next"`
	}
	if err := json.Unmarshal([]byte(stdout), &page); err != nil || len(page.Items) != 2 || page.Next != "" {
		t.Errorf("page %+v (%v) from\n%s", page, err, stdout)
	}
	if got := []string{page.Items[0].ID, page.Items[1].ID}; !reflect.DeepEqual(got, []string{ids[1], ids[0]}) {
		t.Errorf("items %v, want %v newest first", got, ids)
	}
	if !strings.Contains(stdout, "\n  \"items\": [") {
		t.Errorf("JSON not indented:\n%s", stdout)
	}
	reqs := c.requests()
	if len(reqs) != 2 || reqs[0].Query.Get("after") != "" || reqs[1].Query.Get("after") == "" {
		t.Errorf("requests %+v", reqs)
	}
}

func TestOpsNotificationsShow(t *testing.T) {
	c := newTestCentral(t)
	parked, _, _ := seed(c)
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "show", parked)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, s := range []string{"status:", "Parked", "subject:", "Oven 3 [31m too hot", "last error:", "550 mailbox unavailable",
		"site:", "plant-1", "history:", "Permanent", "body:\nbody of Oven 3\uFFFD[31m too hot"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	if strings.Contains(stdout, "next attempt:") || strings.Contains(stdout, "\x1b") {
		t.Errorf("empty fields are shown, or an escape:\n%s", stdout)
	}
	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "show", parked, "--json")
	var d map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &d) != nil || d["id"] != parked || len(d["history"].([]any)) < 2 {
		t.Errorf("JSON: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "show", "01950000-0000-7000-8000-000000000009")
	if code != exitFailure || stdout != "" || stderr != "outbox notifications show: notification 01950000-0000-7000-8000-000000000009 not found\n" {
		t.Errorf("an unknown id: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestOpsNotificationsShowTargets: show prints each target's fate (status,
// attempts, times, last error) and the targets of each attempt, the
// targets as the list holds them; --json carries the same fields as the
// API. A row no attempt went to yet prints no targets table.
func TestOpsNotificationsShowTargets(t *testing.T) {
	c := newTestCentral(t)
	if code, _, stderr := runCmd(t, Lists, c.environ(), "", "put", "mixed", "--type", "email",
		"--target", "ops@example.com", "--target", "bad@example.com", "--target", "env:OUTBOX_HOOK"); code != exitOK {
		t.Fatalf("put the list: exit %d: %s", code, stderr)
	}
	id := c.submit("mixed", "plant-1", "to three")[0]
	waiting := c.submit("ok", "plant-1", "waiting")[0]
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "show", waiting)
	if code != exitOK || strings.Contains(stdout, "TARGET") || strings.Contains(stdout, "attempts by target:") {
		t.Errorf("a row not attempted yet: exit %d %s\n%s", code, stderr, stdout)
	}
	c.dispatch()
	if st := c.status(id); st != ports.StatusParked {
		t.Fatalf("status %s, want Parked", st)
	}

	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "show", id)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	at := testNow.Format("2006-01-02 15:04:05") + " UTC"
	for _, want := range []string{
		"targets:           2 of 3 delivered\n",
		"\ntargets:\nTARGET           STATUS     ATTEMPTS  LAST ATTEMPT             DELIVERED                LAST ERROR\n",
		"ops@example.com  Delivered  1         " + at + "  " + at + "  \n",
		"bad@example.com  Failed     1         " + at + "  -                        550 5.1.1 mailbox [31m unavailable\n",
		"env:OUTBOX_HOOK  Delivered  1         " + at + "  " + at + "  \n",
		"\nattempts by target:\nAT                       TARGET           OUTCOME    ERROR\n",
		at + "  ops@example.com  Success    \n",
		at + "  bad@example.com  Permanent  550 5.1.1 mailbox [31m unavailable\n",
		at + "  env:OUTBOX_HOOK  Success    \n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("an escape reached the terminal:\n%s", stdout)
	}

	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "show", id, "--json")
	var d api.Detail
	if code != exitOK || json.Unmarshal([]byte(stdout), &d) != nil {
		t.Fatalf("JSON: exit %d\n%s", code, stdout)
	}
	_, raw := c.get("/api/v1/notifications/" + id)
	var fromAPI api.Detail
	if err := json.Unmarshal(raw, &fromAPI); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, fromAPI) || len(d.Targets) != 3 || d.Targets[1].Status != ports.TargetFailed ||
		d.Targets[1].Attempts != 1 || !strings.Contains(d.Targets[1].LastError, "550 5.1.1") {
		t.Errorf("--json carries\n%+v\nthe API\n%+v", d, fromAPI)
	}
	for _, key := range []string{`"targets": [`, `"target": "bad@example.com"`, `"status": "Failed"`, `"attempts": 1`,
		`"last_error": "550 5.1.1`, `"delivered_at": "`, `"outcome": "Permanent"`} {
		if !strings.Contains(stdout, key) {
			t.Errorf("--json lacks %s:\n%s", key, stdout)
		}
	}
}

func TestOpsKPI(t *testing.T) {
	c := newTestCentral(t)
	seed(c)
	code, stdout, stderr := runCmd(t, KPI, c.environ(), "")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, s := range []string{"KPIs at 2026-03-01 10:15:00 UTC", "delivered (last 1h):", "SITE", "OLDEST PENDING"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	if !regexpLine(stdout, `^queue depth:\s+1$`) || !regexpLine(stdout, `^stuck:\s+1$`) || !regexpLine(stdout, `^parked:\s+1$`) ||
		!regexpLine(stdout, `^oldest pending:\s+15m$`) {
		t.Errorf("global KPIs:\n%s", stdout)
	}
	// One delivery within the rate's 15 minutes: 1/15 a minute.
	if !regexpLine(stdout, `^delivered per minute \(last 15m\):\s+0\.0667$`) {
		t.Errorf("global rate:\n%s", stdout)
	}
	if !regexpLine(stdout, `^plant-1\s+1\s+1\s+1\s+0\s+0\s+15m$`) || !regexpLine(stdout, `^plant-2\s+0\s+0\s+0\s+1\s+0\.0667\s+-$`) {
		t.Errorf("site rows:\n%s", stdout)
	}
	code, stdout, _ = runCmd(t, KPI, c.environ(), "", "--json")
	var rep map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &rep) != nil || rep["global"].(map[string]any)["queue_depth"] != 1.0 {
		t.Errorf("JSON: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := runCmd(t, KPI, c.environ(), "", "extra"); code != exitUsage || !strings.Contains(stderr, "unexpected argument") {
		t.Errorf("extra argument: exit %d %q", code, stderr)
	}
}

func TestOpsListsTableJSONAndPut(t *testing.T) {
	c := newTestCentral(t)
	code, stdout, _ := runCmd(t, Lists, c.environ(), "", "list")
	want := "NAME   TYPE     TARGETS\nbad    email    1\nhooks  webhook  1\nok     email    1\n"
	if code != exitOK || stdout != want {
		t.Errorf("table:\n%q\nwant\n%q", stdout, want)
	}
	code, stdout, _ = runCmd(t, Lists, c.environ(), "", "list", "--json")
	var ls []map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &ls) != nil || len(ls) != 3 || ls[0]["name"] != "bad" ||
		!strings.HasPrefix(stdout, "[\n  {\n    \"name\"") {
		t.Errorf("JSON:\n%s", stdout)
	}

	// The name before the flags, targets repeated.
	code, stdout, stderr := runCmd(t, Lists, c.environ(), "", "put", "ops b", "--type", "email", "--target", "a@example.com", "--target", "b@example.com")
	if code != exitOK || !strings.Contains(stdout, "targets:  2") || !strings.Contains(stdout, "  b@example.com") {
		t.Errorf("put: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	last := c.last()
	if last.Method != "PUT" || last.Path != "/api/v1/lists/ops%20b" ||
		!jsonEqual(t, last.Body, `{"name":"ops b","type":"email","targets":["a@example.com","b@example.com"]}`) {
		t.Errorf("request %+v", last)
	}
	if code, stdout, _ := runCmd(t, Lists, c.environ(), "", "show", "ops b"); code != exitOK || !strings.Contains(stdout, "  a@example.com") {
		t.Errorf("show after put: exit %d\n%s", code, stdout)
	}

	// From a file; the file's name must agree with the command's.
	dir := t.TempDir()
	file := filepath.Join(dir, "l.json")
	if err := os.WriteFile(file, []byte(`{"type":"webhook","targets":["https://h.example/"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, Lists, c.environ(), "", "put", "fromfile", "--file", file); code != exitOK {
		t.Errorf("put --file: exit %d %s", code, stderr)
	}
	if last := c.last(); last.Path != "/api/v1/lists/fromfile" || !jsonEqual(t, last.Body, `{"name":"fromfile","type":"webhook","targets":["https://h.example/"]}`) {
		t.Errorf("request %+v", last)
	}
	if code, _, stderr := runCmd(t, Lists, c.environ(), `{"name":"stdin","type":"email","targets":[]}`, "put", "--file", "-"); code != exitOK {
		t.Errorf("put --file -: exit %d %s", code, stderr)
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"name":"other","type":"email","targets":[],"tragets":[]}`), 0o600)
	n := len(c.requests())
	for _, args := range [][]string{
		{"put", "fromfile", "--file", bad},
		{"put", "x", "--file", file, "--type", "email"},
		{"put", "--type", "email"},
		{"show"},
		{"delete", "a", "b"},
	} {
		if code, _, stderr := runCmd(t, Lists, c.environ(), "", args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	if len(c.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}

	if code, stdout, _ := runCmd(t, Lists, c.environ(), "", "delete", "ops b"); code != exitOK || stdout != "deleted list ops b\n" {
		t.Errorf("delete: exit %d %q", code, stdout)
	}
	code, stdout, stderr = runCmd(t, Lists, c.environ(), "", "show", "ops b")
	if code != exitFailure || stdout != "" || stderr != "outbox lists show: list \"ops b\" not found\n" {
		t.Errorf("not found: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestOpsChannelsPut(t *testing.T) {
	c := newTestCentral(t)
	// Before any settings row: every type a list names, marked as the
	// defaults.
	_, stdout, _ := runCmd(t, Channels, c.environ(), "", "list")
	if !regexpLine(stdout, `^email\s.*\(no settings row: the defaults\)$`) || !regexpLine(stdout, `^webhook\s.*\(no settings row: the defaults\)$`) {
		t.Errorf("list before any settings row:\n%s", stdout)
	}
	if _, stdout, _ := runCmd(t, Channels, c.environ(), "", "show", "webhook"); !regexpLine(stdout, `^settings:\s+none: no settings row`) {
		t.Errorf("show of a type without a settings row:\n%s", stdout)
	}
	code, stdout, stderr := runCmd(t, Channels, c.environ(), "", "put", "email", "--set", "host=smtp.example.com", "--set", "password=env:SMTP_PW",
		"--backoff", "exponential", "--max-retries", "5", "--interval", "30s", "--max-interval", "1h", "--rate-limit", "2.5")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"type":"email","settings":{"host":"smtp.example.com","password":"env:SMTP_PW"},
		"retry":{"backoff":"exponential","max_retries":5,"interval_seconds":30,"max_interval_seconds":3600},"rate_limit":2.5}`) {
		t.Errorf("body %s", c.last().Body)
	}
	for _, s := range []string{"backoff:", "exponential", "max interval:", "1h", "2.5/s", "password", "= env:SMTP_PW"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q:\n%s", s, stdout)
		}
	}
	if code, _, stderr := runCmd(t, Channels, c.environ(), "", "put", "webhook", "--max-retries", "3", "--interval", "192s"); code != exitOK {
		t.Fatalf("put webhook: exit %d: %s", code, stderr)
	}
	_, stdout, _ = runCmd(t, Channels, c.environ(), "", "list")
	if !regexpLine(stdout, `^email\s+exponential\s+5\s+30s\s+1h\s+2.5/s\s+host,password$`) ||
		!regexpLine(stdout, `^webhook\s+fixed\s+3\s+3m12s\s+default\s+none\s*$`) {
		t.Errorf("list:\n%s", stdout)
	}
	n := len(c.requests())
	for _, args := range [][]string{
		{"put", "email", "--set", "novalue"},
		{"put", "email", "--set", "a=1", "--set", "a=2"},
		{"put", "email", "--file", "x.json", "--max-retries", "3"},
		{"put"},
	} {
		if code, _, stderr := runCmd(t, Channels, c.environ(), "", args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	if len(c.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}
}

func TestOpsUsersPassword(t *testing.T) {
	c := newTestCentral(t)
	const pw = "pa ss word of bob"
	code, stdout, stderr := runCmd(t, Users, c.environ(), pw+"\n", "put", "bob", "--role", "operator", "--password-stdin")
	if code != exitOK || !strings.Contains(stdout, "operator") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"role":"operator","password":"`+pw+`"}`) {
		t.Errorf("body %s", c.last().Body)
	}
	if strings.Contains(stdout+stderr, pw) {
		t.Errorf("the password was printed")
	}
	// bob logs in with it.
	home := t.TempDir()
	if code, _, stderr := runCmd(t, Login, c.environ("HOME="+home), pw+"\n", "--name", "bob", "--password-stdin"); code != exitOK {
		t.Fatalf("bob's login: exit %d, %s", code, stderr)
	}
	// No --password-stdin and no terminal: a role change only.
	if code, _, stderr := runCmd(t, Users, c.environ(), "ignored\n", "put", "bob", "--role", "viewer"); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"role":"viewer"}`) {
		t.Errorf("body %s", c.last().Body)
	}
	// A new user's password piped in without --password-stdin: one
	// sentence that says what to give, the usage exit code, and no put.
	puts := len(c.requests())
	code, _, stderr = runCmd(t, Users, c.environ(), "alice's password\n", "put", "alice", "--role", "viewer")
	if want := `outbox users put: "alice" is a new user, who needs a password: give -password-stdin (standard input is not a terminal to ask it on)` + "\n"; code != exitUsage || stderr != want {
		t.Fatalf("a piped password without --password-stdin: exit %d, stderr %q, want 2 and %q", code, stderr, want)
	}
	if reqs := c.requests(); len(reqs) != puts+1 || reqs[len(reqs)-1].Method != http.MethodGet {
		t.Fatalf("a new user without a password: %d requests after the lookup", len(reqs)-puts-1)
	}
	n := len(c.requests())
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"put", "bob", "--role", "operator", "--password-stdin"}},
		{"x\n", []string{"put", "bob", "--role", "root", "--password-stdin"}},
		{"x\n", []string{"put", "bob", "--password", "x"}},
		{"", []string{"put", "--role", "admin"}},
	} {
		if code, _, stderr := runCmd(t, Users, c.environ(), tc.stdin, tc.args...); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, stderr)
		}
	}
	if len(c.requests()) != n {
		t.Errorf("requests sent for bad usage")
	}
	_, stdout, _ = runCmd(t, Users, c.environ(), "", "list")
	if !regexpLine(stdout, `^bob\s+viewer\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+\s+\d{4}-`) || !regexpLine(stdout, `^admin\s+admin\s+`) {
		t.Errorf("list:\n%s", stdout)
	}
	if code, stdout, _ := runCmd(t, Users, c.environ(), "", "delete", "bob"); code != exitOK || stdout != "deleted user bob\n" {
		t.Errorf("delete: exit %d %q", code, stdout)
	}
	// Gone: the sentence names the user, not the action.
	if code, _, stderr := runCmd(t, Users, c.environ(), "", "delete", "bob"); code != exitFailure || stderr != `outbox users delete: user "bob" not found`+"\n" {
		t.Errorf("delete again: exit %d %q", code, stderr)
	}
}

func TestOpsTokens(t *testing.T) {
	c := newTestCentral(t)
	code, stdout, stderr := runCmd(t, Tokens, c.environ(), "", "create", "ci", "--role", "operator")
	secret := regexp.MustCompile(`(?m)^secret:\s+(obx_\S+)$`).FindStringSubmatch(stdout)
	id := regexp.MustCompile(`(?m)^id:\s+(\S+)$`).FindStringSubmatch(stdout)
	if code != exitOK || secret == nil || id == nil || !strings.Contains(stderr, "cannot be shown again") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !jsonEqual(t, c.last().Body, `{"name":"ci","role":"operator"}`) {
		t.Errorf("body %s", c.last().Body)
	}
	// The new token works, with its role.
	if code, _, stderr := runCmd(t, KPI, c.environToken(secret[1]), ""); code != exitOK {
		t.Errorf("kpi with the new token: exit %d %s", code, stderr)
	}
	code, stdout, stderr = runCmd(t, Tokens, c.environ(), "", "create", "ci2", "--role", "operator", "--json")
	var ct map[string]any
	if code != exitOK || json.Unmarshal([]byte(stdout), &ct) != nil || !strings.HasPrefix(ct["secret"].(string), "obx_") ||
		!strings.Contains(stderr, "cannot be shown again") {
		t.Errorf("JSON: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ := runCmd(t, Tokens, c.environ(), "", "list"); code != exitOK || !regexpLine(stdout, `^`+id[1]+`\s+ci\s+operator\s+-\s+\d{4}-\S+ \S+ UTC\s+never$`) {
		t.Errorf("list: %d\n%s", code, stdout)
	}
	if code, stdout, _ := runCmd(t, Tokens, c.environ(), "", "delete", id[1], "--json"); code != exitOK || stdout != "" {
		t.Errorf("delete --json: %d %q", code, stdout)
	}
	if code, _, stderr := runCmd(t, KPI, c.environToken(secret[1]), ""); code != exitFailure || !strings.Contains(stderr, "unknown or revoked token") {
		t.Errorf("kpi with the revoked token: exit %d %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, Tokens, c.environ(), "", "create", "ci"); code != exitUsage || !strings.Contains(stderr, "-role") {
		t.Errorf("no role: %d %q", code, stderr)
	}
}

func TestOpsTokenSources(t *testing.T) {
	c := newTestCentral(t)
	server := "OUTBOX_SERVER=" + c.srv.URL
	admin := c.tokens[ports.RoleAdmin]
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(c.tokens[ports.RoleViewer]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth := func(environ []string, args ...string) string {
		t.Helper()
		if code, _, stderr := runCmd(t, KPI, environ, "", args...); code != exitOK {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		return c.last().Auth
	}
	viewer := "Bearer " + c.tokens[ports.RoleViewer]
	if got := auth(c.environ(), "--token-file", file); got != viewer {
		t.Errorf("--token-file: %q", got)
	}
	if got := auth([]string{server, "OUTBOX_TOKEN=file:" + file}); got != viewer {
		t.Errorf("OUTBOX_TOKEN reference: %q", got)
	}
	if got := auth([]string{server}, "--token", "file:"+file); got != viewer {
		t.Errorf("--token reference: %q", got)
	}
	if got := auth(c.environ()); got != "Bearer "+admin {
		t.Errorf("OUTBOX_TOKEN: %q", got)
	}
	if code, _, stderr := runCmd(t, KPI, c.environ(), "", "--token-file", filepath.Join(dir, "none")); code != exitUsage ||
		!strings.Contains(stderr, "-token-file") {
		t.Errorf("missing token file: %d %q", code, stderr)
	}
}

func TestOpsServerErrors(t *testing.T) {
	c := newTestCentral(t)
	parked := c.submit("bad", "plant-1", "x")[0]
	c.dispatch()
	viewer := c.environToken(c.tokens[ports.RoleViewer])
	code, stdout, stderr := runCmd(t, Notifications, viewer, "", "retry", parked)
	if code != exitFailure || stdout != "" || !strings.HasPrefix(stderr, "outbox notifications retry: this needs the operator role") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// No token at all: one line that says what to do, and no call that
	// the server would refuse.
	sent := len(c.requests())
	code, _, stderr = runCmd(t, KPI, []string{"OUTBOX_SERVER=" + c.srv.URL, "HOME=" + t.TempDir()}, "")
	if want := "outbox kpi: no API token was given: run outbox login, set OUTBOX_TOKEN or give -token-file\n"; code != exitFailure || stderr != want || len(c.requests()) != sent {
		t.Errorf("exit %d, stderr %q, %d requests; want 1, %q and none", code, stderr, len(c.requests())-sent, want)
	}
	// Unreachable.
	code, _, stderr = runCmd(t, Lists, []string{"OUTBOX_SERVER=http://" + plugintest.RefusedAddr(t), "OUTBOX_TOKEN=" + c.tokens[ports.RoleAdmin]}, "", "list")
	if code != exitFailure || !strings.HasPrefix(stderr, "outbox lists list: GET /api/v1/lists: ") || !strings.Contains(stderr, "connection refused") ||
		strings.HasSuffix(stderr, ": unavailable\n") {
		t.Errorf("unreachable: exit %d, stderr %q", code, stderr)
	}
}

func TestOpsHelp(t *testing.T) {
	for name, cmd := range map[string]command{"notifications": Notifications, "kpi": KPI, "lists": Lists,
		"channels": Channels, "users": Users, "tokens": Tokens, "audit": Audit} {
		code, stdout, stderr := runCmd(t, cmd, nil, "", "help")
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: outbox "+name) || !strings.Contains(stdout, "-token-file") || stderr != "" {
			t.Errorf("%s help: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
		}
		if name == "kpi" || name == "audit" {
			continue
		}
		code, stdout, stderr = runCmd(t, cmd, nil, "")
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, "Usage: outbox "+name) {
			t.Errorf("%s without a command: exit %d, stderr %q", name, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, Lists, nil, "", "put", "-h"); code != exitOK || !strings.Contains(stderr, "-target") {
		t.Errorf("put -h: %d %q", code, stderr)
	}
}
