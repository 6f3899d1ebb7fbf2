package opscli

import (
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// TestOpsNotificationsRetryNowAndPark: retry-now makes a Retrying
// notification due at once (the next dispatch attempts it again, its
// retry count growing) and park parks one, against the real server, by
// ids without -yes; an id that is not Retrying is refused with why, and
// the command fails. No ids, a filter flag and a viewer's token are
// refused and move nothing.
func TestOpsNotificationsRetryNowAndPark(t *testing.T) {
	c := newTestCentral(t)
	if code, _, stderr := runCmd(t, Lists, c.environ(), "", "put", "flaky", "-type", "email", "-target", "later@example.com"); code != exitOK {
		t.Fatalf("lists put flaky: exit %d, %s", code, stderr)
	}
	retrying := c.submit("flaky", "plant-1", "a", "b")
	parked := c.submit("bad", "plant-1", "c")[0]
	c.dispatch()
	for _, id := range retrying {
		if st := c.status(id); st != ports.StatusRetrying {
			t.Fatalf("%s is %s, want Retrying", id, st)
		}
	}
	retries := func(id string) int {
		d, err := c.svc.Notification(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return d.RetryCount
	}
	before := retries(retrying[0])
	c.dispatch()
	if n := retries(retrying[0]); n != before {
		t.Fatalf("the row was attempted again before its time: retry count %d, was %d", n, before)
	}

	sent := len(c.requests())
	for _, args := range [][]string{{"retry-now"}, {"park"}, {"park", retrying[0], "-status", "Retrying"}, {"retry-now", "-all"}} {
		if code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", args...); code != exitUsage || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want a usage error", args, code, stdout, stderr)
		}
	}
	code, _, stderr := runCmd(t, Notifications, c.environToken(c.tokens[ports.RoleViewer]), "", "park", retrying[0])
	if code != exitFailure || !strings.Contains(stderr, "operator role") {
		t.Errorf("a viewer's park: exit %d, stderr %q", code, stderr)
	}
	if n := len(c.requests()); n != sent+1 {
		t.Errorf("the refused commands sent %d requests, want only the viewer's", n-sent)
	}

	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "retry-now", retrying[0], parked)
	if code != exitFailure || !strings.Contains(stdout, "retried now 1 notification") ||
		!regexp.MustCompile(parked+`\s+conflict\s+notification `+parked+` is Parked; only Retrying notifications can be retried now`).MatchString(stdout) ||
		!strings.Contains(stderr, "1 of 2 notifications refused") {
		t.Fatalf("retry-now: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if last := c.last(); last.Method != "POST" || last.Path != "/api/v1/notifications/retry-now" ||
		!jsonEqual(t, last.Body, `{"ids":["`+retrying[0]+`","`+parked+`"]}`) {
		t.Errorf("retry-now sent %+v", last)
	}
	c.dispatch()
	if n := retries(retrying[0]); n <= before {
		t.Errorf("after retry-now the dispatch did not attempt the row: retry count %d, was %d", n, before)
	}
	if n := retries(retrying[1]); n != before {
		t.Errorf("retry-now of one row attempted another: retry count %d", n)
	}

	code, stdout, stderr = runCmd(t, Notifications, c.environ(), "", "park", retrying[1], "-json")
	if code != exitOK || !strings.Contains(stdout, `"moved": [`) || !strings.Contains(stdout, retrying[1]) {
		t.Fatalf("park: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if st := c.status(retrying[1]); st != ports.StatusParked {
		t.Errorf("%s is %s after park, want Parked", retrying[1], st)
	}
	if st := c.status(retrying[0]); st != ports.StatusRetrying {
		t.Errorf("%s is %s: park moved a row it was not given", retrying[0], st)
	}
}

// TestOpsNotificationsListOldest: -oldest lists oldest first (order=oldest
// on the wire), and its hint for the next page keeps -oldest.
func TestOpsNotificationsListOldest(t *testing.T) {
	c := newTestCentral(t)
	for _, s := range []string{"first", "second", "third"} {
		c.submit("ok", "plant-1", s)
		c.clock.Advance(time.Second)
	}
	subjects := func(stdout string) []string {
		return regexp.MustCompile(`(first|second|third)`).FindAllString(stdout, -1)
	}
	code, stdout, stderr := runCmd(t, Notifications, c.environ(), "", "list", "-oldest", "-limit", "2")
	if code != exitOK || !reflect.DeepEqual(subjects(stdout), []string{"first", "second"}) ||
		!regexp.MustCompile(`repeat with -after \S+ -oldest`).MatchString(stderr) {
		t.Fatalf("list -oldest: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if q := c.last().Query; !reflect.DeepEqual(q, url.Values{"order": {"oldest"}, "limit": {"2"}}) {
		t.Errorf("list -oldest sent %v", q)
	}
	after := regexp.MustCompile(`-after (\S+)`).FindStringSubmatch(stderr)[1]
	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "list", "-after", after, "-oldest")
	if code != exitOK || !reflect.DeepEqual(subjects(stdout), []string{"third"}) {
		t.Errorf("the next page oldest first: exit %d, stdout %q", code, stdout)
	}
	code, stdout, _ = runCmd(t, Notifications, c.environ(), "", "list")
	if code != exitOK || !reflect.DeepEqual(subjects(stdout), []string{"third", "second", "first"}) {
		t.Errorf("list: exit %d, stdout %q", code, stdout)
	}
}
