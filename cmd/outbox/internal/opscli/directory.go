package opscli

// outbox lists and outbox channels: the directory, listed, shown, put and deleted.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/client"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

const listsUsage = `Usage: outbox lists <command> [flags]

Manage notification lists (changing them needs the admin role).

Commands:
  list     every list with its type and number of targets
  show     NAME
  put      NAME -type T -target X [-target Y ...]
           create the list or replace it whole
  put      [NAME] -file F.json
           the same from a file holding the API's list ({"name", "type",
           "targets"}; - reads standard input)
  delete   NAME
` + opsCommonUsage

const channelsUsage = `Usage: outbox channels <command> [flags]

Manage the settings of channel types (changing them needs the admin role).

Commands:
  list     every channel type in use (a settings row, a loaded plugin or a
           list naming it) with its retry policy and setting names; a type
           without a settings row delivers with the defaults
  show     TYPE
  put      TYPE [-set KEY=VALUE ...] [-backoff fixed|exponential]
                [-max-retries N] [-interval D] [-max-interval D] [-rate-limit R]
           create the channel's settings or replace them whole: give every
           setting (secrets as references env:NAME or file:/path)
  put      [TYPE] -file F.json
           the same from a file holding the API's channel ({"type",
           "settings", "retry", "rate_limit"}; - reads standard input)
  delete   TYPE
` + opsCommonUsage

// Lists is `outbox lists`.
func Lists(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("lists", listsUsage, args, env, opsCommon("lists", env), "list", "show", "put", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox lists "+sub, env)
	var (
		typ, file string
		targets   repeated
	)
	if sub == "put" {
		r.fs.StringVar(&typ, "type", "", "the list's channel `type` (email, webhook, ...)")
		r.fs.Var(&targets, "target", "a `target` (an address, a URL); repeat for several")
		r.fs.StringVar(&file, "file", "", "read the list from a JSON `file` (- for standard input)")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	var l api.List
	switch sub {
	case "list":
		if len(operands) > 0 {
			return r.usage("unexpected argument %q", operands[0])
		}
	case "show", "delete":
		if len(operands) != 1 {
			return r.usage("give one list name")
		}
	case "put":
		if len(operands) > 1 {
			return r.usage("give one list name")
		}
		if file == "" {
			if len(operands) == 0 {
				return r.usage("give the list's name")
			}
			l = api.List{Name: operands[0], Type: typ, Targets: targets}
			if l.Targets == nil {
				l.Targets = []string{}
			}
			break
		}
		if typ != "" || len(targets) > 0 {
			return r.usage("give -file, or -type and -target: not both")
		}
		if err := opsReadJSON(file, r.stdin, &l); err != nil {
			return r.usage("%v", err)
		}
		if len(operands) == 1 {
			if l.Name != "" && l.Name != operands[0] {
				return r.usage("the file names the list %q, the command %q", human.Cell(l.Name, 40), human.Cell(operands[0], 40))
			}
			l.Name = operands[0]
		}
		if l.Name == "" {
			return r.usage("give the list's name (the file names none)")
		}
	}
	return opsRunCRUD(ctx, r, sub, operands, func(c *client.Client) opsCRUD[api.List] {
		return opsCRUD[api.List]{
			list: c.Lists, show: c.List, remove: c.DeleteList,
			put: func(ctx context.Context) (api.List, error) { return c.PutList(ctx, l) },
			table: func(tw io.Writer, ls []api.List) {
				fmt.Fprintln(tw, "NAME\tTYPE\tTARGETS")
				for _, l := range ls {
					fmt.Fprintf(tw, "%s\t%s\t%d\n", human.Cell(l.Name, 60), human.Cell(l.Type, 20), len(l.Targets))
				}
			},
			detail:  opsPrintList,
			deleted: "deleted list %s",
		}
	})
}

// Channels is `outbox channels`.
func Channels(ctx context.Context, env Env, args []string) int {
	sub, rest, code, ok := opsSubcommand("channels", channelsUsage, args, env, opsCommon("channels", env), "list", "show", "put", "delete")
	if !ok {
		return code
	}
	r := newOpsRun("outbox channels "+sub, env)
	var (
		file, backoff         string
		sets                  repeated
		maxRetries            int
		interval, maxInterval time.Duration
		rateLimit             float64
	)
	if sub == "put" {
		r.fs.StringVar(&file, "file", "", "read the channel from a JSON `file` (- for standard input)")
		r.fs.Var(&sets, "set", "a setting as `key=value`; repeat for several")
		r.fs.StringVar(&backoff, "backoff", "", "retry schedule: fixed or exponential (default fixed)")
		r.fs.IntVar(&maxRetries, "max-retries", 0, "park after `N` failed attempts (default: central's)")
		r.fs.DurationVar(&interval, "interval", 0, "wait `D` between attempts (exponential: the first wait)")
		r.fs.DurationVar(&maxInterval, "max-interval", 0, "exponential: the longest wait `D`")
		r.fs.Float64Var(&rateLimit, "rate-limit", 0, "at most `R` deliveries a second (0: no limit)")
	}
	operands, code, ok := r.parse(rest)
	if !ok {
		return code
	}
	var ch api.Channel
	switch sub {
	case "list":
		if len(operands) > 0 {
			return r.usage("unexpected argument %q", operands[0])
		}
	case "show", "delete":
		if len(operands) != 1 {
			return r.usage("give one channel type")
		}
	case "put":
		if len(operands) > 1 {
			return r.usage("give one channel type")
		}
		if file == "" {
			if len(operands) == 0 {
				return r.usage("give the channel type")
			}
			ch = api.Channel{Type: operands[0], Settings: map[string]string{}, RateLimit: rateLimit,
				Retry: api.Retry{Backoff: ports.Backoff(backoff), MaxRetries: maxRetries,
					IntervalSeconds: interval.Seconds(), MaxIntervalSeconds: maxInterval.Seconds()}}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if k = strings.TrimSpace(k); !ok || k == "" {
					return r.usage("-set %q: want key=value", human.Cell(kv, 40))
				}
				if _, dup := ch.Settings[k]; dup {
					return r.usage("-set: the setting %q is given twice", human.Cell(k, 40))
				}
				ch.Settings[k] = v
			}
			break
		}
		given := false
		r.fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "set", "backoff", "max-retries", "interval", "max-interval", "rate-limit":
				given = true
			}
		})
		if given {
			return r.usage("give -file, or -set and the retry flags: not both")
		}
		if err := opsReadJSON(file, r.stdin, &ch); err != nil {
			return r.usage("%v", err)
		}
		if len(operands) == 1 {
			if ch.Type != "" && ch.Type != operands[0] {
				return r.usage("the file names the channel type %q, the command %q", human.Cell(ch.Type, 40), human.Cell(operands[0], 40))
			}
			ch.Type = operands[0]
		}
		if ch.Type == "" {
			return r.usage("give the channel type (the file names none)")
		}
		if ch.Settings == nil {
			ch.Settings = map[string]string{}
		}
	}
	return opsRunCRUD(ctx, r, sub, operands, func(c *client.Client) opsCRUD[api.Channel] {
		return opsCRUD[api.Channel]{
			list: c.Channels, show: c.Channel, remove: c.DeleteChannel,
			put: func(ctx context.Context) (api.Channel, error) { return c.PutChannel(ctx, ch) },
			table: func(tw io.Writer, chs []api.Channel) {
				fmt.Fprintln(tw, "TYPE\tBACKOFF\tMAX RETRIES\tINTERVAL\tMAX INTERVAL\tRATE LIMIT\tSETTINGS")
				for _, ch := range chs {
					settings := human.Cell(strings.Join(opsKeys(ch.Settings), ","), 60)
					if ch.Defaults {
						settings = "(no settings row: the defaults)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", human.Cell(ch.Type, 30), opsBackoff(ch.Retry.Backoff),
						opsDefault(ch.Retry.MaxRetries), opsSecondsOrDefault(ch.Retry.IntervalSeconds),
						opsSecondsOrDefault(ch.Retry.MaxIntervalSeconds), opsRate(ch.RateLimit), settings)
				}
			},
			detail:  opsPrintChannel,
			deleted: "deleted the settings of channel %s",
		}
	})
}

// opsCRUD is how one kind of directory entry (a list, a channel) is listed,
// shown, put and deleted, and printed.
type opsCRUD[T any] struct {
	list    func(context.Context) ([]T, error)
	show    func(context.Context, string) (T, error)
	put     func(context.Context) (T, error)
	remove  func(context.Context, string) error
	table   func(tw io.Writer, all []T)
	detail  func(w io.Writer, one T)
	deleted string
}

// opsRunCRUD dials central and runs sub (list, show, put or delete) with
// the calls crud makes from the client.
func opsRunCRUD[T any](ctx context.Context, r *opsRun, sub string, operands []string, crud func(*client.Client) opsCRUD[T]) int {
	c, ctx, done, code, ok := r.connect(ctx)
	if !ok {
		return code
	}
	defer done()
	k := crud(c)
	switch sub {
	case "list":
		all, err := k.list(ctx)
		if err != nil {
			return r.failed(err)
		}
		if all == nil {
			all = []T{}
		}
		return r.print(all, func(w io.Writer) {
			tw := opsTable(w)
			k.table(tw, all)
			tw.Flush()
		})
	case "show":
		one, err := k.show(ctx, operands[0])
		if err != nil {
			return r.failed(err)
		}
		return r.print(one, func(w io.Writer) { k.detail(w, one) })
	case "put":
		got, err := k.put(ctx)
		if err != nil {
			return r.failed(err)
		}
		return r.print(got, func(w io.Writer) { k.detail(w, got) })
	default:
		if err := k.remove(ctx, operands[0]); err != nil {
			return r.failed(err)
		}
		return r.done(k.deleted, operands[0])
	}
}

// opsReadJSON decodes one JSON value from a file (- for in), refusing
// unknown fields so that a misspelt one is not silently dropped.
func opsReadJSON(path string, in io.Reader, v any) error {
	var r io.Reader
	if path == "-" {
		r = in
	} else {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(io.LimitReader(r, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("-file %s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("-file %s: more than one JSON value", path)
	}
	return nil
}

func opsPrintList(w io.Writer, l api.List) {
	tw := opsTable(w)
	fmt.Fprintf(tw, "name:\t%s\ntype:\t%s\ntargets:\t%d\n", human.Cell(l.Name, 200), human.Cell(l.Type, 200), len(l.Targets))
	tw.Flush()
	for _, t := range l.Targets {
		fmt.Fprintf(w, "  %s\n", human.Cell(t, 1000))
	}
}

func opsPrintChannel(w io.Writer, ch api.Channel) {
	tw := opsTable(w)
	fmt.Fprintf(tw, "type:\t%s\n", human.Cell(ch.Type, 200))
	fmt.Fprintf(tw, "backoff:\t%s\n", opsBackoff(ch.Retry.Backoff))
	fmt.Fprintf(tw, "max retries:\t%s\n", opsDefault(ch.Retry.MaxRetries))
	fmt.Fprintf(tw, "interval:\t%s\n", opsSecondsOrDefault(ch.Retry.IntervalSeconds))
	fmt.Fprintf(tw, "max interval:\t%s\n", opsSecondsOrDefault(ch.Retry.MaxIntervalSeconds))
	fmt.Fprintf(tw, "rate limit:\t%s\n", opsRate(ch.RateLimit))
	if ch.Defaults {
		fmt.Fprintf(tw, "settings:\tnone: no settings row, the type delivers with the defaults\n")
	} else {
		fmt.Fprintf(tw, "settings:\t%d\n", len(ch.Settings))
	}
	tw.Flush()
	tw = opsTable(w)
	for _, k := range opsKeys(ch.Settings) {
		fmt.Fprintf(tw, "  %s\t= %s\n", human.Cell(k, 100), human.Cell(ch.Settings[k], 1000))
	}
	tw.Flush()
}

func opsSecondsOrDefault(s float64) string {
	if s <= 0 {
		return "default"
	}
	return human.Duration(human.Seconds(s))
}

func opsDefault(n int) string {
	if n <= 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func opsBackoff(b ports.Backoff) string {
	if b == "" {
		return string(ports.BackoffFixed)
	}
	return human.Cell(string(b), 20)
}

func opsRate(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}

func opsKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, ",") }

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
