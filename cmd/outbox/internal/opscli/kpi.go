package opscli

// outbox kpi: the delivery KPIs.

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/siteline/outbox/adapters/httpapi/human"
)

const kpiUsage = `Usage: outbox kpi [flags]

Print the delivery KPIs: queue depth, stuck, parked, delivered in the KPI
window and the oldest pending age, globally and per source site.
` + opsCommonUsage

// KPI is `outbox kpi`.
func KPI(ctx context.Context, env Env, args []string) int {
	if len(args) > 0 && opsIsHelp(args[0]) {
		fmt.Fprint(env.Stdout, kpiUsage)
		return exitOK
	}
	r := newOpsRun("outbox kpi", env)
	operands, code, ok := r.parse(args)
	if !ok {
		return code
	}
	if len(operands) > 0 {
		return r.usage("unexpected argument %q", operands[0])
	}
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()
	rep, err := c.KPIs(ctx)
	if err != nil {
		return r.failed(err)
	}
	return r.print(rep, func(w io.Writer) {
		window := human.Duration(human.Seconds(rep.WindowSeconds))
		fmt.Fprintf(w, "KPIs at %s\n\n", opsTime(&rep.At, r.loc))
		tw := opsTable(w)
		g := rep.Global
		fmt.Fprintf(tw, "queue depth:\t%d\n", g.QueueDepth)
		fmt.Fprintf(tw, "stuck:\t%d\n", g.Stuck)
		fmt.Fprintf(tw, "parked:\t%d\n", g.Parked)
		fmt.Fprintf(tw, "delivered (last %s):\t%d\n", window, g.Delivered)
		fmt.Fprintf(tw, "delivered per minute (last %s):\t%s\n", human.Duration(human.Seconds(rep.RateWindowSeconds)), opsPerMinute(g.DeliveredPerMinute))
		fmt.Fprintf(tw, "oldest pending:\t%s\n", opsAge(g.OldestPendingAgeSeconds))
		tw.Flush()
		if len(rep.Sites) == 0 {
			return
		}
		fmt.Fprintln(w)
		tw = opsTable(w)
		fmt.Fprintln(tw, "SITE\tQUEUE\tSTUCK\tPARKED\tDELIVERED\tPER MINUTE\tOLDEST PENDING")
		for _, s := range rep.Sites {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", human.Cell(s.Site, 40), s.QueueDepth, s.Stuck, s.Parked,
				s.Delivered, opsPerMinute(s.DeliveredPerMinute), opsAge(s.OldestPendingAgeSeconds))
		}
		tw.Flush()
	})
}

// opsAge is an age in seconds, humanized; "-" for none.
func opsAge(s float64) string {
	if s <= 0 {
		return "-"
	}
	return human.Duration(human.Seconds(s))
}

// opsPerMinute is a per-minute rate: three significant digits, "0" for none.
func opsPerMinute(r float64) string {
	if r <= 0 {
		return "0"
	}
	return strconv.FormatFloat(r, 'g', 3, 64)
}
