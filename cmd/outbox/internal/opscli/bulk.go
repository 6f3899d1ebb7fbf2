package opscli

// What the commands over rows an operator retries and discards share
// (notifications, site-calls): the filter flags' statuses and times,
// fetching every page, the preview that pins a bulk action's count, and
// the exit of an action with refusals.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
)

// opsStatuses reads the repeated, comma-separated -status flags with
// parse, in any letter case, each status once; names lists the statuses
// for the error.
func opsStatuses[S comparable](raws []string, parse func(string) (S, bool), names string) ([]S, error) {
	var out []S
	for _, raw := range raws {
		for s := range strings.SplitSeq(raw, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			st, ok := parse(s)
			if !ok {
				return nil, fmt.Errorf("-status: unknown status %q (want %s)", human.Cell(s, 40), names)
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out, nil
}

// opsTimeFlag is a time flag's name, its value and where it goes.
type opsTimeFlag struct {
	flag string
	raw  string
	dst  **time.Time
}

// opsTimes reads the time flags (see opsParseTime) into their places.
func opsTimes(now time.Time, loc *time.Location, flags ...opsTimeFlag) error {
	for _, t := range flags {
		v, err := opsParseTime(t.raw, now, loc)
		if err != nil {
			return fmt.Errorf("%s: %w", t.flag, err)
		}
		*t.dst = v
	}
	return nil
}

// opsAllPages fetches the page after after, and with all every following
// one, until a page has no next cursor; it returns the items and the last
// next cursor.
func opsAllPages[T any](after string, all bool, fetch func(after string) ([]T, string, error)) ([]T, string, error) {
	var items []T
	for {
		page, next, err := fetch(after)
		if err != nil {
			return nil, "", err
		}
		items = append(items, page...)
		if !all || next == "" {
			return items, next, nil
		}
		if next == after || len(page) == 0 {
			return nil, "", fmt.Errorf("the server returned the cursor %q again: stopping", human.Cell(next, 40))
		}
		after = next
	}
}

// previewBulk is the step before an action on every Parked row a filter
// selects: it counts them (as of pinned, the pin flag pinFlag as given, or
// else as of now) and prints how many match and the flags that act on
// exactly those, -yes and the pin at the count's instant. The instant is
// central's (the count's At, whole: truncated to the second, a row parked
// in the second before the count would fall outside the pin the count
// included it in), not this machine's, whose clock may be off. noun names
// one row ("parked site call"). It exits exitPreview: nothing was done.
func (r *opsRun) previewBulk(sub, noun, pinFlag string, pinned *time.Time, count func(pin *time.Time) (api.Count, error)) int {
	if pinned != nil && pinned.After(time.Now()) {
		pinned = nil
	}
	res, err := count(pinned)
	if err != nil {
		return r.failed(err)
	}
	n, pin := res.Count, time.Now().UTC()
	switch {
	case pinned != nil:
		pin = *pinned
	case res.At != nil:
		pin = res.At.UTC()
	}
	if n == 0 {
		fmt.Fprintf(r.stdout, "no %s match: nothing to %s\n", human.Plural(2, noun), sub)
		return exitOK
	}
	flags := " -yes " + pinFlag + " " + pin.Format(time.RFC3339Nano)
	if n == 1 {
		fmt.Fprintf(r.stderr, "1 %s matches; repeat with%s to %s it\n", noun, flags, sub)
	} else {
		fmt.Fprintf(r.stderr, "%d %s match; repeat with%s to %s them\n", n, human.Plural(n, noun), flags, sub)
	}
	return exitPreview
}

// refusedExit is the exit of an action that printed its result with code:
// a failure when some rows were refused, said on stderr.
func (r *opsRun) refusedExit(code, refused, done int, noun string) int {
	if code != exitOK || refused == 0 {
		return code
	}
	total := int64(refused + done)
	fmt.Fprintf(r.stderr, "%s: %d of %d %s refused\n", r.name, refused, total, human.Plural(total, noun))
	return exitFailure
}

// checkSelection checks how a retry or discard selects its rows: by
// naming them (keys of them, named "the ids" in messages as named says),
// by filters, or -all, one of them (-all may carry the count's pin, and
// beyondPin says a filter sets more than it); parked says whether the
// status filter, if any, admits Parked rows. ok false says to return code.
func (r *opsRun) checkSelection(sub string, keys int, filtered, beyondPin, all, parked bool, named, noun string) (code int, ok bool) {
	switch {
	case keys > 0 && (all || filtered):
		return r.usage("give the %s, or filters, or -all: not several", named), false
	case all && beyondPin:
		return r.usage("-all selects every Parked %s: give it without filters", noun), false
	case keys == 0 && !all && !filtered:
		return r.usage("give the %s to %s, filters selecting them, or -all", named, sub), false
	case keys == 0 && !parked:
		return r.usage("only Parked %s can be %s: the -status filter leaves none", human.Plural(2, noun), opsPast(sub)), false
	}
	return exitOK, true
}
