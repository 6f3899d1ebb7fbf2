package opscli

// outbox site-calls: list, show, count, retry and discard the sites' cached
// calls and writes as central's mirror holds them; outbox sites: the
// sites' health.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

const siteCallsUsage = `Usage: outbox site-calls <command> [flags]

List, inspect, retry and discard the sites' cached calls to external systems
and cached database writes, as central's mirror holds them (each site reports
its own). A Retry or Discard is relayed to the site that owns the call: the
row shows "Retry requested by NAME at TIME" until the site reports the
outcome.

Commands:
  list     [filters] [-limit N] [-after CURSOR] [-all-pages]
           list site calls, newest first, one page (or every page)
  show     SITE ID
           one site call with the commands operators relayed for it
  count    [filters]
           how many site calls match
  retry    (SITE ID [ID ...] | filters | -all) [-yes]
           ask the site to attempt Parked calls again
  discard  (SITE ID [ID ...] | filters | -all) [-yes]
           ask the site to discard Parked calls

Filters (set ones are ANDed):
  -status S         Pending, Retrying, Parked, Delivered, Failed or
                    Discarded; repeat the flag or separate with commas
  -site S           the site
  -kind K           call or write (ExternalCall or DatabaseWrite)
  -target T         the external system or database connection
  -from T           created at or after T
  -to T             created before T
  -updated-from T   changed at the site at or after T ("parked since T")
  -updated-to T     changed at the site before T
  -reported-to T    reported to central before T (central's time)
  -q WORD           the id, target, method, last error, source instance or
                    script contains WORD, in any letter case
Times are RFC 3339 (2026-01-02T15:04:05Z), a local date or date and time
(2026-01-02, 2026-01-02T15:04), or a duration meaning that long ago (90m, 24h).

retry and discard given a site and ids act on those calls of that site.
Without them they act on every Parked call the filters (or -all) select;
they first print how many that is, and the flags that act on exactly those:
-yes, and -reported-to the instant of the count, so that a call whose
parking reaches central after the count (late telemetry, a site back from an
outage) is left alone, however early the site parked it. -all combines with
-reported-to alone.
` + opsCommonUsage

const sitesUsage = `Usage: outbox sites [SITE] [flags]

Print every site that reported to central, or one: its state (connected,
stale or disconnected, by its last contact), the last contact as an age and a
UTC time, the node that leads, its cached calls, and each node's latest
health: role and term, notification backlog, cached calls and writes waiting
and parked, and its last contact with central.
` + opsCommonUsage

// SiteCalls is `outbox site-calls`.
func SiteCalls(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("site-calls", siteCallsUsage, args, env, opsCommon("site-calls", env),
		"list", "show", "count", "retry", "discard")
	if !ok {
		return code
	}
	r := newOpsRun("outbox site-calls "+sub, env)
	var (
		ff       siteCallFilterFlags
		limit    int
		after    string
		allPages bool
		all, yes bool
	)
	switch sub {
	case "list":
		ff.define(r.fs)
		r.fs.IntVar(&limit, "limit", 0, "at most `N` site calls a page (default: the server's)")
		r.fs.StringVar(&after, "after", "", "start after the `cursor` a previous page printed")
		r.fs.BoolVar(&allPages, "all-pages", false, "fetch and print every page")
	case "count":
		ff.define(r.fs)
	case "retry", "discard":
		ff.define(r.fs)
		r.fs.BoolVar(&all, "all", false, "select every Parked site call")
		r.fs.BoolVar(&yes, "yes", false, "act on a selection by filter or -all without asking")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	switch {
	case sub == "show" && len(operands) != 2:
		return r.usage("give the site and the id of one site call")
	case (sub == "list" || sub == "count") && len(operands) > 0:
		return r.usage("unexpected argument %q", human.Cell(operands[0], 40))
	case (sub == "retry" || sub == "discard") && len(operands) == 1:
		return r.usage("give the site and then the ids of its calls to %s", sub)
	case limit < 0:
		return r.usage("-limit must be positive")
	}
	f, err := ff.filter(time.Now(), r.loc)
	if err != nil {
		return r.usage("%v", err)
	}
	if sub == "retry" || sub == "discard" {
		// Bad usage is said before the token is looked for.
		if code, ok := r.checkSiteCallSelection(sub, max(len(operands)-1, 0), f, all); !ok {
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
		return r.listSiteCalls(ctx, c, f, limit, after, allPages)
	case "show":
		d, err := c.SiteCall(ctx, operands[0], operands[1])
		if err != nil {
			return r.failed(err)
		}
		return r.print(d, func(w io.Writer) { opsPrintSiteCall(w, d, r.loc) })
	case "count":
		n, err := c.CountSiteCalls(ctx, f)
		if err != nil {
			return r.failed(err)
		}
		return r.print(api.Count{Count: n}, func(w io.Writer) { fmt.Fprintln(w, n) })
	default:
		var keys []api.SiteCallKey
		if len(operands) > 0 {
			for _, id := range operands[1:] {
				keys = append(keys, api.SiteCallKey{Site: operands[0], ID: id})
			}
		}
		return r.actSiteCalls(ctx, c, sub, keys, f, all, yes)
	}
}

// listSiteCalls prints one page of site calls, or every page.
func (r *opsRun) listSiteCalls(ctx context.Context, c *client.Client, f api.SiteCallFilter, limit int, after string, allPages bool) int {
	var page api.SiteCallPage
	var err error
	page.Items, page.Next, err = opsAllPages(after, allPages, func(after string) ([]api.SiteCall, string, error) {
		p, err := c.SiteCalls(ctx, f, limit, after)
		return p.Items, p.Next, err
	})
	if err != nil {
		return r.failed(err)
	}
	if page.Items == nil {
		page.Items = []api.SiteCall{}
	}
	code := r.print(page, func(w io.Writer) {
		if len(page.Items) == 0 {
			fmt.Fprintln(r.stderr, "no site calls match")
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "SITE\tID\tKIND\tTARGET\tSTATUS\tRETRIES\tCREATED\tUPDATED\tREQUESTED\tLAST ERROR")
		for _, sc := range page.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", human.Cell(sc.Site, 40), human.Cell(sc.ID, 40),
				opsKind(sc.Kind), opsTarget(sc), human.Cell(string(sc.Status), 20), sc.RetryCount,
				opsTime(sc.CreatedAt, r.loc), opsTime(sc.UpdatedAt, r.loc), opsRequestedShort(sc), human.Cell(sc.LastError, 60))
		}
		tw.Flush()
	})
	if code == exitOK && page.Next != "" && !r.asJSON {
		fmt.Fprintf(r.stderr, "more site calls: repeat with -after %s (or -all-pages)\n", page.Next)
	}
	return code
}

// checkSiteCallSelection is checkSelection for retry or discard of site
// calls: by a site and ids (keys of them), filters or -all.
func (r *opsRun) checkSiteCallSelection(sub string, keys int, f api.SiteCallFilter, all bool) (code int, ok bool) {
	parked := len(f.Status) == 0 || slices.Contains(f.Status, ports.OpParked)
	beyondPin := f
	beyondPin.ReportedTo = nil
	return r.checkSelection(sub, keys, !f.IsZero(), !beyondPin.IsZero(), all, parked, "site and ids", "site call")
}

// actSiteCalls is retry or discard. Keys act at once; a selection by
// filter or -all first counts the Parked rows it selects and acts only
// with -yes.
func (r *opsRun) actSiteCalls(ctx context.Context, c *client.Client, sub string, keys []api.SiteCallKey, f api.SiteCallFilter, all, yes bool) int {
	if code, ok := r.checkSiteCallSelection(sub, len(keys), f, all); !ok {
		return code
	}
	req := api.SiteCallActionRequest{Keys: keys}
	if len(keys) == 0 {
		if all && f.IsZero() {
			req.All = true
		} else {
			req.Filter = &f
		}
		if !yes {
			return r.previewBulk(sub, "parked site call", "-reported-to", f.ReportedTo, func(pin *time.Time) (api.Count, error) {
				parked := f
				parked.Status, parked.ReportedTo = []ports.OpStatus{ports.OpParked}, pin
				return c.CountSiteCallsAt(ctx, parked)
			})
		}
	}
	do := c.RetrySiteCalls
	if sub == "discard" {
		do = c.DiscardSiteCalls
	}
	res, err := do(ctx, req)
	if err != nil {
		return r.failed(err)
	}
	if res.Requested == nil {
		res.Requested = []api.SiteCallKey{}
	}
	n := int64(len(res.Requested))
	code := r.print(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s requested for %d %s; each changes when its site reports\n", sub, n, human.Plural(n, "site call"))
		if len(res.Refused) == 0 {
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "REFUSED SITE\tID\tREASON")
		for _, x := range res.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", human.Cell(x.Site, 40), human.Cell(x.ID, 40), human.Cell(x.Reason, 200))
		}
		tw.Flush()
	})
	return r.refusedExit(code, len(res.Refused), len(res.Requested), "site call")
}

// siteCallFilterFlags are the filter flags of site-calls list, count,
// retry and discard.
type siteCallFilterFlags struct {
	status                                                                 repeated
	site, kind, target, from, to, updatedFrom, updatedTo, reportedTo, word string
}

func (f *siteCallFilterFlags) define(fs *flag.FlagSet) {
	fs.Var(&f.status, "status", "only this `status` (Pending, Retrying, Parked, Delivered, Failed, Discarded); repeat or comma-separate")
	fs.StringVar(&f.site, "site", "", "only of this `site`")
	fs.StringVar(&f.kind, "kind", "", "only this `kind`: call or write")
	fs.StringVar(&f.target, "target", "", "only to this external system or database connection `name`")
	fs.StringVar(&f.from, "from", "", "created at or after `time`")
	fs.StringVar(&f.to, "to", "", "created before `time`")
	fs.StringVar(&f.updatedFrom, "updated-from", "", "changed at or after `time`")
	fs.StringVar(&f.updatedTo, "updated-to", "", "changed before `time`")
	fs.StringVar(&f.reportedTo, "reported-to", "", "reported to central before `time` (the pin of a count)")
	fs.StringVar(&f.word, "q", "", "the id, target, method, last error, instance or script contains `word` (any letter case)")
}

// filter is the flags as an API filter; zone-less times are read in loc
// and durations count back from now.
func (f *siteCallFilterFlags) filter(now time.Time, loc *time.Location) (api.SiteCallFilter, error) {
	out := api.SiteCallFilter{Site: strings.TrimSpace(f.site), Target: strings.TrimSpace(f.target), Q: strings.TrimSpace(f.word)}
	switch k := strings.TrimSpace(f.kind); {
	case k == "":
	case strings.EqualFold(k, "call") || strings.EqualFold(k, string(ports.OpCall)):
		out.Kind = ports.OpCall
	case strings.EqualFold(k, "write") || strings.EqualFold(k, string(ports.OpWrite)):
		out.Kind = ports.OpWrite
	default:
		return api.SiteCallFilter{}, fmt.Errorf("-kind: unknown kind %q (want call or write)", human.Cell(k, 40))
	}
	var err error
	out.Status, err = opsStatuses(f.status, api.ParseOpStatus, "Pending, Retrying, Parked, Delivered, Failed or Discarded")
	if err != nil {
		return api.SiteCallFilter{}, err
	}
	if err := opsTimes(now, loc, opsTimeFlag{"-from", f.from, &out.From}, opsTimeFlag{"-to", f.to, &out.To},
		opsTimeFlag{"-updated-from", f.updatedFrom, &out.UpdatedFrom}, opsTimeFlag{"-updated-to", f.updatedTo, &out.UpdatedTo},
		opsTimeFlag{"-reported-to", f.reportedTo, &out.ReportedTo}); err != nil {
		return api.SiteCallFilter{}, err
	}
	return out, nil
}

// opsKind is a kind as the tables show it: call or write.
func opsKind(k ports.OpKind) string {
	switch k {
	case ports.OpCall:
		return "call"
	case ports.OpWrite:
		return "write"
	}
	return human.Cell(string(k), 20)
}

// opsTarget is a site call's target, with the method of a call.
func opsTarget(sc api.SiteCall) string {
	if sc.Method == "" {
		return human.Cell(sc.Target, 60)
	}
	return human.Cell(sc.Target+"."+sc.Method, 60)
}

// opsRequestedShort is a pending request as a list shows it: "Retry by
// ann"; "-" for none.
func opsRequestedShort(sc api.SiteCall) string {
	if sc.Requested == "" {
		return "-"
	}
	return human.Cell(string(sc.Requested)+" by "+sc.RequestedBy, 60)
}

// opsPrintSiteCall writes one site call and its commands.
func opsPrintSiteCall(w io.Writer, d api.SiteCallDetail, loc *time.Location) {
	tw := opsTable(w)
	opsKV(tw, "site:", human.Cell(d.Site, 200))
	opsKV(tw, "id:", human.Cell(d.ID, 200))
	opsKV(tw, "kind:", opsKind(d.Kind))
	opsKV(tw, "target:", human.Cell(d.Target, 200))
	opsKV(tw, "method:", human.Cell(d.Method, 200))
	opsKV(tw, "status:", human.Cell(string(d.Status), 20))
	if d.Requested != "" {
		opsKV(tw, "requested:", fmt.Sprintf("%s requested by %s at %s, until the site reports", d.Requested,
			human.Cell(d.RequestedBy, 60), opsTime(d.RequestedAt, loc)))
	}
	opsKV(tw, "retries:", strconv.Itoa(d.RetryCount))
	opsKV(tw, "last error:", human.Cell(d.LastError, 1000))
	opsKV(tw, "instance:", human.Cell(d.SourceInstance, 200))
	opsKV(tw, "script:", human.Cell(d.SourceScript, 200))
	opsKV(tw, "execution:", human.Cell(d.ExecutionID, 200))
	opsKV(tw, "parent execution:", human.Cell(d.ParentExecutionID, 200))
	opsKV(tw, "version:", strconv.FormatUint(d.Version, 10))
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"created:", d.CreatedAt}, {"updated:", d.UpdatedAt}, {"next attempt:", d.NextAttemptAt},
		{"terminal:", d.TerminalAt}, {"reported:", d.ReportedAt}} {
		opsKV(tw, t.k, opsTime(t.v, loc))
	}
	tw.Flush()
	if len(d.Commands) > 0 {
		fmt.Fprintln(w, "\ncommands:")
		tw = opsTable(w)
		fmt.Fprintln(tw, "REQUESTED\tACTION\tACTOR\tSTATE\tFINISHED\tRESULT")
		for _, c := range d.Commands {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", opsTime(&c.RequestedAt, loc), human.Cell(string(c.Action), 20),
				human.Cell(c.Actor, 60), human.Cell(string(c.State), 20), opsTime(c.FinishedAt, loc), human.Cell(c.Result, 200))
		}
		tw.Flush()
	}
}

// Sites is `outbox sites`.
func Sites(ctx context.Context, env Env, args []string) int {
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, sitesUsage)
		return exitOK
	}
	r := newOpsRun("outbox sites", env)
	operands, code, ok := r.parse(args)
	if !ok {
		return code
	}
	if len(operands) > 1 {
		return r.usage("unexpected argument %q: give at most one site", human.Cell(operands[1], 40))
	}
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()
	now := time.Now()
	if len(operands) == 1 {
		s, err := c.Site(ctx, operands[0])
		if err != nil {
			return r.failed(err)
		}
		return r.print(s, func(w io.Writer) {
			tw := opsTable(w)
			opsKV(tw, "site:", human.Cell(s.Site, 200))
			opsKV(tw, "state:", string(s.State))
			opsKV(tw, "last contact:", opsContact(s.LastContact, now))
			opsKV(tw, "leader:", human.Cell(s.Leader, 200))
			opsKV(tw, "cached calls:", opsCallCounts(s.Calls))
			opsKV(tw, "oldest buffered:", opsTime(s.Calls.OldestBufferedAt, r.loc))
			tw.Flush()
			opsPrintNodes(w, []api.Site{s}, now)
		})
	}
	sites, err := c.Sites(ctx)
	if err != nil {
		return r.failed(err)
	}
	if sites == nil {
		sites = []api.Site{}
	}
	return r.print(sites, func(w io.Writer) {
		if len(sites) == 0 {
			fmt.Fprintln(r.stderr, "no site has reported to central")
			return
		}
		tw := opsTable(w)
		fmt.Fprintln(tw, "SITE\tSTATE\tLAST CONTACT\tLEADER\tNODES\tCACHED CALLS")
		for _, s := range sites {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", human.Cell(s.Site, 40), human.Cell(string(s.State), 20),
				opsContact(s.LastContact, now), opsOr(human.Cell(s.Leader, 40)), len(s.Nodes), opsCallCounts(s.Calls))
		}
		tw.Flush()
		opsPrintNodes(w, sites, now)
	})
}

// opsPrintNodes writes the nodes of sites, one a line; nothing when no
// node reported.
func opsPrintNodes(w io.Writer, sites []api.Site, now time.Time) {
	n := 0
	for _, s := range sites {
		n += len(s.Nodes)
	}
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nnodes:")
	tw := opsTable(w)
	fmt.Fprintln(tw, "SITE\tNODE\tROLE\tTERM\tREPORTED\tBACKLOG\tOLDEST\tCALLS WAITING/PARKED\tWRITES WAITING/PARKED\tCENTRAL CONTACT\tCENTRAL ERROR")
	for _, s := range sites {
		for _, nd := range s.Nodes {
			calls, writes := "-", "-"
			for _, o := range nd.Operations {
				v := fmt.Sprintf("%d/%d", o.Backlog, o.Parked)
				switch o.Kind {
				case ports.OpCall:
					calls = v
				case ports.OpWrite:
					writes = v
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", human.Cell(s.Site, 40), human.Cell(nd.Node, 40),
				opsOr(human.Cell(string(nd.Role), 20)), nd.Term, opsAgo(nd.ReportedAt, now), nd.Backlog,
				opsAgo(nd.OldestEnqueuedAt, now), calls, writes, opsAgo(nd.LastCentralContact, now),
				opsOr(human.Cell(nd.LastCentralError, 80)))
		}
	}
	tw.Flush()
}

// opsContact is a last contact as its age and its UTC time:
// "12s ago (2026-11-24 12:00:00 UTC)"; "never" for none.
func opsContact(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return opsAgo(t, now) + " (" + t.UTC().Format("2006-01-02 15:04:05") + " UTC)"
}

// opsAgo is how long before now t was: "12s ago"; "-" for none.
func opsAgo(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return human.Duration(max(now.Sub(*t), 0).Truncate(time.Second)) + " ago"
}

// opsCallCounts are a site's cached-call counts in one cell.
func opsCallCounts(k api.SiteCallKPI) string {
	return fmt.Sprintf("%d parked, %d retrying, %d pending, %d failed in the last hour", k.Parked, k.Retrying, k.Pending, k.FailedLastHour)
}

// opsOr is s, or "-" when empty.
func opsOr(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
