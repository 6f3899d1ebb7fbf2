package opscli

// outbox notifications: list, show, count, retry, discard, retry-now and
// park.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

const notificationsUsage = `Usage: outbox notifications <command> [flags]

List, inspect, retry, discard and park the notifications central holds.

Commands:
  list      [filters] [-oldest] [-limit N] [-after CURSOR] [-all-pages]
            list notifications, newest (or oldest) first, one page (or
            every page)
  show      ID
            one notification with its body, each target's fate (status,
            attempts, last error) and its history
  count     [filters]
            how many notifications match
  retry     (ID ... | filters | -all) [-yes]
            move Parked notifications back to Pending to deliver them again
  discard   (ID ... | filters | -all) [-yes]
            move Parked notifications to Discarded (they stay for the audit)
  retry-now ID ...
            make Retrying notifications due at once instead of at their next
            attempt (their retry count and last error kept)
  park      ID ...
            park Retrying notifications: no more attempts until a retry or a
            discard

Filters (set ones are ANDed):
  -status S         Pending, Retrying, Delivered, Parked or Discarded;
                    repeat the flag or separate with commas
  -type T           channel type (email, webhook, ...)
  -site S           source site
  -list L           list name
  -from T           created at or after T
  -to T             created before T
  -updated-from T   changed at or after T ("parked since T")
  -updated-to T     changed before T
  -stuck            only stuck notifications
  -q WORD           the subject contains WORD, in any letter case
Times are RFC 3339 (2026-01-02T15:04:05Z), a local date or date and time
(2026-01-02, 2026-01-02T15:04), or a duration meaning that long ago (90m, 24h).

retry and discard given ids act on those ids. Without ids they act on every
Parked notification the filters (or -all) select; they first print how many
that is, and the flags that act on exactly those: -yes, and -updated-to the
instant of the count, so that a notification parked later is left alone.
retry-now and park act on the ids given, each refused (with why) unless it is
Retrying and not being delivered at that moment.
` + opsCommonUsage

// Notifications is `outbox notifications`.
func Notifications(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("notifications", notificationsUsage, args, env, opsCommon("notifications", env),
		"list", "show", "count", "retry", "discard", "retry-now", "park")
	if !ok {
		return code
	}
	r := newOpsRun("outbox notifications "+sub, env)
	var (
		ff        opsFilterFlags
		oldest    bool
		limit     int
		after     string
		allPages  bool
		all, yes  bool
		wantsArgs = "no arguments"
	)
	switch sub {
	case "list":
		ff.define(r.fs)
		r.fs.IntVar(&limit, "limit", 0, "at most `N` notifications a page (default: the server's)")
		r.fs.StringVar(&after, "after", "", "start after the `cursor` a previous page printed")
		r.fs.BoolVar(&allPages, "all-pages", false, "fetch and print every page")
		r.fs.BoolVar(&oldest, "oldest", false, "list oldest first (by creation time)")
	case "show":
		wantsArgs = "one id"
	case "count":
		ff.define(r.fs)
	case "retry", "discard":
		ff.define(r.fs)
		r.fs.BoolVar(&all, "all", false, "select every Parked notification")
		r.fs.BoolVar(&yes, "yes", false, "act on a selection by filter or -all without asking")
		wantsArgs = "ids"
	case "retry-now", "park":
		wantsArgs = "ids"
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	switch {
	case sub == "show" && len(operands) != 1:
		return r.usage("give one notification id")
	case (sub == "retry-now" || sub == "park") && len(operands) == 0:
		return r.usage("give the ids of the Retrying notifications to %s", sub)
	case wantsArgs == "no arguments" && len(operands) > 0:
		return r.usage("unexpected argument %q", operands[0])
	case limit < 0:
		return r.usage("-limit must be positive")
	}
	f, err := ff.filter(time.Now(), r.loc)
	if err != nil {
		return r.usage("%v", err)
	}
	if sub == "retry" || sub == "discard" {
		// Bad usage is said before the token is looked for.
		if code, ok := r.checkNotificationSelection(sub, operands, f, all); !ok {
			return code
		}
	}
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()

	switch sub {
	case "list":
		return r.listNotifications(ctx, c, f, limit, after, allPages, oldest)
	case "show":
		d, err := c.Notification(ctx, operands[0])
		if err != nil {
			return r.failed(err)
		}
		return r.print(d, func(w io.Writer) { opsPrintDetail(w, d, r.loc) })
	case "count":
		n, err := c.Count(ctx, f)
		if err != nil {
			return r.failed(err)
		}
		return r.print(api.Count{Count: n}, func(w io.Writer) { fmt.Fprintln(w, n) })
	case "retry-now", "park":
		do := c.RetryNow
		if sub == "park" {
			do = c.Park
		}
		res, err := do(ctx, api.ActionRequest{IDs: operands})
		if err != nil {
			return r.failed(err)
		}
		return r.printAction(sub, res)
	default:
		return r.act(ctx, c, sub, operands, f, all, yes)
	}
}

// listNotifications prints one page of notifications, or every page.
func (r *opsRun) listNotifications(ctx context.Context, c *client.Client, f api.Filter, limit int, after string, allPages, oldest bool) int {
	var page api.NotificationPage
	var err error
	list := c.Notifications
	if oldest {
		list = c.NotificationsOldestFirst
	}
	page.Items, page.Next, err = opsAllPages(after, allPages, func(after string) ([]api.Notification, string, error) {
		p, err := list(ctx, f, limit, after)
		return p.Items, p.Next, err
	})
	if err != nil {
		return r.failed(err)
	}
	if page.Items == nil {
		page.Items = []api.Notification{}
	}
	code := r.print(page, func(w io.Writer) {
		if len(page.Items) == 0 {
			fmt.Fprintln(r.stderr, "no notifications match")
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tLIST\tSITE\tRETRIES\tCREATED\tUPDATED\tSUBJECT")
		for _, n := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", human.Cell(n.ID, 40), opsStatus(n.Status, n.Stuck),
				human.Cell(n.Type, 20), human.Cell(n.List, 30), human.Cell(n.SourceSite, 20), n.RetryCount,
				opsTime(n.CreatedAt, r.loc), opsTime(n.UpdatedAt, r.loc), human.Cell(n.Subject, 60))
		}
		tw.Flush()
	})
	if code == exitOK && page.Next != "" && !r.asJSON {
		again := "-after " + page.Next
		if oldest {
			again += " -oldest"
		}
		fmt.Fprintf(r.stderr, "more notifications: repeat with %s (or -all-pages)\n", again)
	}
	return code
}

// checkNotificationSelection is checkSelection for retry or discard of
// notifications: by ids, filters or -all.
func (r *opsRun) checkNotificationSelection(sub string, ids []string, f api.Filter, all bool) (code int, ok bool) {
	parked := len(f.Status) == 0 || slices.Contains(f.Status, ports.StatusParked)
	beyondPin := f
	beyondPin.UpdatedTo = nil
	return r.checkSelection(sub, len(ids), !f.IsZero(), !beyondPin.IsZero(), all, parked, "ids", "notification")
}

// act is retry or discard. Ids act at once; a selection by filter or -all
// first counts the Parked rows it selects and acts only with -yes.
func (r *opsRun) act(ctx context.Context, c *client.Client, sub string, ids []string, f api.Filter, all, yes bool) int {
	if code, ok := r.checkNotificationSelection(sub, ids, f, all); !ok {
		return code
	}
	req := api.ActionRequest{IDs: ids}
	if len(ids) == 0 {
		if all && f.IsZero() {
			req.All = true
		} else {
			req.Filter = &f
		}
		if !yes {
			return r.previewBulk(sub, "parked notification", "-updated-to", f.UpdatedTo, func(pin *time.Time) (api.Count, error) {
				parked := f
				parked.Status, parked.UpdatedTo = []ports.Status{ports.StatusParked}, pin
				return c.CountAt(ctx, parked)
			})
		}
	}
	do := c.Retry
	if sub == "discard" {
		do = c.Discard
	}
	res, err := do(ctx, req)
	if err != nil {
		return r.failed(err)
	}
	return r.printAction(sub, res)
}

// printAction prints the result of the action sub: how many notifications
// it moved, and each refused id with why. It fails when some were refused.
func (r *opsRun) printAction(sub string, res api.ActionResult) int {
	if res.Moved == nil {
		res.Moved = []string{}
	}
	code := r.print(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s %d %s\n", opsPast(sub), len(res.Moved), human.Plural(int64(len(res.Moved)), "notification"))
		if len(res.Refused) == 0 {
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "REFUSED\tCODE\tREASON")
		for _, x := range res.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", human.Cell(x.ID, 40), human.Cell(x.Code, 20), human.Cell(x.Message, 120))
		}
		tw.Flush()
	})
	return r.refusedExit(code, len(res.Refused), len(res.Moved), "notification")
}

// opsFilterFlags are the filter flags of notifications list, count, retry
// and discard.
type opsFilterFlags struct {
	status                                                  repeated
	typ, site, list, from, to, updatedFrom, updatedTo, word string
	stuck                                                   bool
}

func (f *opsFilterFlags) define(fs *flag.FlagSet) {
	fs.Var(&f.status, "status", "only this `status` (Pending, Retrying, Delivered, Parked, Discarded); repeat or comma-separate")
	fs.StringVar(&f.typ, "type", "", "only this channel `type`")
	fs.StringVar(&f.site, "site", "", "only from this source `site`")
	fs.StringVar(&f.list, "list", "", "only to this `list`")
	fs.StringVar(&f.from, "from", "", "created at or after `time`")
	fs.StringVar(&f.to, "to", "", "created before `time`")
	fs.StringVar(&f.updatedFrom, "updated-from", "", "changed at or after `time`")
	fs.StringVar(&f.updatedTo, "updated-to", "", "changed before `time`")
	fs.BoolVar(&f.stuck, "stuck", false, "only stuck notifications")
	fs.StringVar(&f.word, "q", "", "the subject contains `word` (any letter case)")
}

// filter is the flags as an API filter; zone-less times are read in loc
// and durations count back from now.
func (f *opsFilterFlags) filter(now time.Time, loc *time.Location) (api.Filter, error) {
	out := api.Filter{Type: strings.TrimSpace(f.typ), Site: strings.TrimSpace(f.site),
		List: strings.TrimSpace(f.list), Q: strings.TrimSpace(f.word), Stuck: f.stuck}
	var err error
	out.Status, err = opsStatuses(f.status, api.ParseStatus, "Pending, Retrying, Delivered, Parked or Discarded")
	if err != nil {
		return api.Filter{}, err
	}
	if err := opsTimes(now, loc, opsTimeFlag{"-from", f.from, &out.From}, opsTimeFlag{"-to", f.to, &out.To},
		opsTimeFlag{"-updated-from", f.updatedFrom, &out.UpdatedFrom}, opsTimeFlag{"-updated-to", f.updatedTo, &out.UpdatedTo}); err != nil {
		return api.Filter{}, err
	}
	return out, nil
}

// opsTimeLayouts are the zone-less forms of a time flag, read in the
// display zone.
var opsTimeLayouts = []string{"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// opsParseTime reads a time flag: RFC 3339, a zone-less date or datetime in
// loc, or a duration meaning that long before now. "" is nil.
func opsParseTime(s string, now time.Time, loc *time.Location) (*time.Time, error) {
	if s = strings.TrimSpace(s); s == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		t = t.UTC()
		return &t, nil
	}
	for _, layout := range opsTimeLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		t := now.Add(-d).UTC()
		return &t, nil
	}
	return nil, fmt.Errorf("%q is not a time: give RFC 3339 (2026-01-02T15:04:05Z), a local date or datetime (2026-01-02, 2026-01-02T15:04) or how long ago (90m, 24h)", human.Cell(s, 40))
}

// opsPrintDetail writes one notification and its history.
func opsPrintDetail(w io.Writer, d api.Detail, loc *time.Location) {
	tw := opsTable(w)
	opsKV(tw, "id:", human.Cell(d.ID, 200))
	opsKV(tw, "status:", opsStatus(d.Status, d.Stuck))
	opsKV(tw, "type:", human.Cell(d.Type, 200))
	opsKV(tw, "list:", human.Cell(d.List, 200))
	opsKV(tw, "subject:", human.Cell(d.Subject, 1000))
	opsKV(tw, "priority:", strconv.Itoa(d.Priority))
	opsKV(tw, "retries:", strconv.Itoa(d.RetryCount))
	opsKV(tw, "last error:", human.Cell(d.LastError, 1000))
	if len(d.Targets) > 0 {
		opsKV(tw, "targets:", api.TargetsSummary(d.Targets))
	} else {
		opsKV(tw, "targets:", human.Cell(strings.Join(d.ResolvedTargets, ", "), 1000))
	}
	opsKV(tw, "type data:", human.Cell(string(d.TypeData), 1000))
	opsKV(tw, "site:", human.Cell(d.SourceSite, 200))
	opsKV(tw, "instance:", human.Cell(d.SourceInstance, 200))
	opsKV(tw, "script:", human.Cell(d.SourceScript, 200))
	opsKV(tw, "execution:", human.Cell(d.ExecutionID, 200))
	opsKV(tw, "parent execution:", human.Cell(d.ParentExecutionID, 200))
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"enqueued at site:", d.SiteEnqueuedAt}, {"created:", d.CreatedAt}, {"updated:", d.UpdatedAt},
		{"last attempt:", d.LastAttemptAt}, {"next attempt:", d.NextAttemptAt}, {"delivered:", d.DeliveredAt},
		{"expires:", d.ExpiresAt}} {
		opsKV(tw, t.k, opsTime(t.v, loc))
	}
	tw.Flush()
	if len(d.Targets) > 0 {
		fmt.Fprintln(w, "\ntargets:")
		tw = opsTable(w)
		fmt.Fprintln(tw, "TARGET\tSTATUS\tATTEMPTS\tLAST ATTEMPT\tDELIVERED\tLAST ERROR")
		for _, t := range d.Targets {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", human.Cell(t.Target, 200), human.Cell(string(t.Status), 20),
				t.Attempts, opsTime(t.LastAttemptAt, loc), opsTime(t.DeliveredAt, loc), human.Cell(t.LastError, 200))
		}
		tw.Flush()
	}
	if len(d.History) > 0 {
		fmt.Fprintln(w, "\nhistory:")
		tw = opsTable(w)
		fmt.Fprintln(tw, "AT\tKIND\tACTOR\tOUTCOME\tSTATUS\tDURATION\tERROR")
		for _, h := range d.History {
			dur := ""
			if h.DurationSeconds > 0 {
				dur = human.Duration(human.Seconds(h.DurationSeconds))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", opsTime(&h.At, loc), human.Cell(string(h.Kind), 20),
				human.Cell(h.Actor, 60), human.Cell(string(h.Outcome), 20), human.Cell(string(h.Status), 20), dur,
				human.Cell(h.Error, 200))
		}
		tw.Flush()
		opsPrintAttemptTargets(w, d.History, loc)
	}
	if d.Body != "" {
		fmt.Fprintf(w, "\nbody:\n%s\n", human.Text(d.Body))
	}
}

// opsPrintAttemptTargets writes the targets each attempt of the history
// went to, with their outcomes; nothing when no record names targets.
func opsPrintAttemptTargets(w io.Writer, history []api.AuditRecord, loc *time.Location) {
	var tw *tabwriter.Writer
	for _, h := range history {
		for _, t := range h.Targets {
			if tw == nil {
				fmt.Fprintln(w, "\nattempts by target:")
				tw = opsTable(w)
				fmt.Fprintln(tw, "AT\tTARGET\tOUTCOME\tERROR")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", opsTime(&h.At, loc), human.Cell(t.Target, 200),
				human.Cell(string(t.Outcome), 20), human.Cell(t.Error, 200))
		}
	}
	if tw != nil {
		tw.Flush()
	}
}

func opsStatus(s ports.Status, stuck bool) string {
	out := human.Cell(string(s), 20)
	if stuck {
		out += " (stuck)"
	}
	return out
}

func opsPast(verb string) string {
	switch verb {
	case "discard":
		return "discarded"
	case "retry-now":
		return "retried now"
	case "park":
		return "parked"
	}
	return "retried"
}
