// Package cli is what every command of the outbox binary shares on top of
// the standard library's flag package: flags after (and between) the
// arguments, "did you mean" for a mistyped command or flag, whether to
// print colour (NO_COLOR), and the probe that shell completion asks of the
// very FlagSets and subcommand lists the commands parse with.
//
// The flag syntax stays flag's own: -name value, -name=value, also written
// --name; "--" ends the flags.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/siteline/outbox/adapters/httpapi/human"
)

// Probe is the argument shell completion appends to a command's arguments
// to learn its subcommands and flags instead of running it: a command
// hands its arguments to Parse (which answers with the FlagSet's flags)
// and its subcommand dispatch to Subcommands (which answers with the
// subcommands). Nobody types it: it starts with a NUL byte.
const Probe = "\x00complete"

// Probing reports whether args end with Probe.
func Probing(args []string) bool {
	return len(args) > 0 && args[len(args)-1] == Probe
}

// ErrUnknownFlag is what Parse returns for a flag that fs does not define.
var ErrUnknownFlag = errors.New("flag provided but not defined")

// Exit codes of ParseArgs, the binary's: help asked for, bad usage.
const (
	ExitHelp  = 0
	ExitUsage = 2
)

// AnyOperands is ParseArgs's maxOperands for a command that takes any
// number of operands.
const AnyOperands = -1

// Parse parses args into fs with flags and operands in any order: "outbox
// notify status ID -site X" is "outbox notify status -site X ID". "--"
// ends the flags; what follows is operands even when it starts with "-".
// Afterwards fs.Args() are the operands, as with fs.Parse. Every flag
// error (an unknown flag, with the nearest defined one; a missing or bad
// value) is reported on fs.Output() after fs.Name() ("outbox notify send:
// flag needs an argument: -subject"), then fs.Usage; -h and -help give
// flag.ErrHelp as fs.Parse does. Under a completion probe (Probing)
// nothing is parsed: the flags are written to fs.Output() and the error is
// flag.ErrHelp, so that the command returns at once.
func Parse(fs *flag.FlagSet, args []string) error {
	if Probing(args) {
		writeFlags(fs.Output(), fs)
		return flag.ErrHelp
	}
	var operands []string
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			operands = append(operands, args[1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a)
			args = args[1:]
			continue
		}
		name, hasValue := flagName(a)
		f := fs.Lookup(name)
		if f == nil && name != "h" && name != "help" {
			hint := SuggestionText("-", name, FlagNames(fs))
			if len(operands) > 0 || !looksLikeFlag(name) {
				hint += ` (an argument that starts with "-" goes after --)`
			}
			fmt.Fprintf(fs.Output(), "%s: flag provided but not defined: -%s%s\n", fs.Name(), human.Cell(name, 40), hint)
			usage(fs)
			return fmt.Errorf("flag -%s: %w", human.Cell(name, 40), ErrUnknownFlag)
		}
		n := 1
		if f != nil && !hasValue && !isBool(f) && len(args) > 1 {
			n = 2
		}
		if err := parseQuiet(fs, args[:n]); err != nil {
			return err
		}
		args = args[n:]
	}
	// Leave the operands where fs.Args() finds them.
	return parseQuiet(fs, append([]string{"--"}, operands...))
}

// ParseArgs is Parse for a command's body: ok false says to return code,
// ExitHelp after -h (the usage was printed) and ExitUsage after bad usage
// (the error was printed), which includes more operands than maxOperands
// (AnyOperands for no bound): an operand a command does not take is
// refused before it acts, never ignored.
func ParseArgs(fs *flag.FlagSet, args []string, maxOperands int) (code int, ok bool) {
	if err := Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitHelp, false
		}
		return ExitUsage, false
	}
	if maxOperands >= 0 && fs.NArg() > maxOperands {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), human.Cell(fs.Arg(maxOperands), 40))
		usage(fs)
		return ExitUsage, false
	}
	return 0, true
}

// parseQuiet is fs.Parse with its error said after fs.Name(), as Parse's
// own are.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	out, u := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = u
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(fs)
	case err != nil:
		fmt.Fprintf(out, "%s: %v\n", fs.Name(), err)
		usage(fs)
	}
	return err
}

// usage prints fs's usage, as fs.Parse does.
func usage(fs *flag.FlagSet) {
	if fs.Usage != nil {
		fs.Usage()
		return
	}
	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	fs.PrintDefaults()
}

// looksLikeFlag reports whether name could be a flag's: no space, no
// control character, not another "-".
func looksLikeFlag(name string) bool {
	return name != "" && !strings.HasPrefix(name, "-") && !strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r == 0x7f
	})
}

// Refused defines a flag that is only ever refused (-password: a secret
// on the command line): it is parsed, so that the command can refuse it
// with a reason and without echoing its value, and reports whether it was
// given; completion and "did you mean" never offer it.
func Refused(fs *flag.FlagSet, name, usage string) *bool {
	v := new(refusedValue)
	fs.Var(v, name, usage)
	return &v.given
}

// refusedValue is a Refused flag's value: whether it was given, never the
// value.
type refusedValue struct{ given bool }

func (v *refusedValue) String() string { return "" }

func (v *refusedValue) Set(string) error { v.given = true; return nil }

// offered reports whether completion and suggestions may offer f.
func offered(f *flag.Flag) bool {
	_, refused := f.Value.(*refusedValue)
	return !refused
}

// flagName is the name of the flag argument a ("-site", "--site=x"), and
// whether it carries its value.
func flagName(a string) (name string, hasValue bool) {
	name = a[1:]
	if strings.HasPrefix(name, "-") && len(name) > 1 {
		name = name[1:]
	}
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue
}

// isBool reports whether f is a boolean flag, one that takes no value
// unless written -name=value.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// FlagNames are the names of fs's flags, sorted, Refused ones aside.
func FlagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if offered(f) {
			names = append(names, f.Name)
		}
	})
	return names
}

// writeFlags answers a probe with fs's flags, one a line:
// "flag NAME bool|value". Refused flags are left out.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if !offered(f) {
			return
		}
		kind := "value"
		if isBool(f) {
			kind = "bool"
		}
		fmt.Fprintf(w, "flag\t%s\t%s\n", f.Name, kind)
	})
}

// Subcommands answers a completion probe at a command's subcommand level:
// when args is just Probe it writes subs to w, one a line ("sub NAME"),
// and reports true: the command then returns 0 at once. A command that
// also takes flags at that level (outbox site, outbox migrate) goes on to
// Parse, which adds them.
func Subcommands(w io.Writer, args []string, subs ...string) bool {
	if len(args) != 1 || args[0] != Probe {
		return false
	}
	for _, s := range subs {
		fmt.Fprintf(w, "sub\t%s\n", s)
	}
	return true
}

// Suggest returns the candidate a mistyped name most likely meant: the
// only one it is a prefix of, else the nearest within two edits (one for
// names of up to three letters); "" when none is near.
func Suggest(name string, candidates []string) string {
	limit := 2
	if len(name) <= 3 {
		limit = 1
	}
	best, bestDist := "", limit+1
	var prefixed []string
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := EditDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
		if len(name) >= 2 && strings.HasPrefix(c, name) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// SuggestionText is Suggest's answer as the end of an error message,
// ` (did you mean "-site"?)` with prefix "-"; "" when none is near.
func SuggestionText(prefix, name string, candidates []string) string {
	s := Suggest(name, candidates)
	if s == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", prefix+s)
}

// EditDistance is the Levenshtein distance between a and b, in bytes.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Color reports whether output to a terminal may be coloured: not when
// NO_COLOR is set to a non-empty value (https://no-color.org), nor when
// the output is not a terminal (isTerminal false).
func Color(environ []string, isTerminal bool) bool {
	if !isTerminal {
		return false
	}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "NO_COLOR" && v != "" {
			return false
		}
	}
	return true
}

// ErrFlagBeforeCommand is what SplitSubcommand returns for a flag before
// the subcommand that only the subcommand knows.
var ErrFlagBeforeCommand = errors.New("only the flags every command takes may come before it")

// SplitSubcommand finds the subcommand in args when flags come before it
// ("outbox notify -site X health"): the first operand, skipping the flags
// fs defines (and the value of each that takes one) and -h. rest is args
// without it, the flags before it kept for the subcommand's own Parse; sub
// is "" when args hold no operand. A flag before the operand that fs does
// not define is an error wrapping ErrFlagBeforeCommand, naming the nearest
// flag fs does define ("did you mean"): whether it takes a value, and so
// which word is the subcommand, is unknown there.
func SplitSubcommand(fs *flag.FlagSet, args []string) (sub string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == Probe {
			return "", args, nil
		}
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1], append(slices.Clone(args[:i+1]), args[i+2:]...), nil
			}
			return "", args, nil
		}
		if len(a) < 2 || a[0] != '-' {
			return a, append(slices.Clone(args[:i]), args[i+1:]...), nil
		}
		name, hasValue := flagName(a)
		if name == "h" || name == "help" {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			return "", args, fmt.Errorf("flag -%s%s before the command: %w", human.Cell(name, 40),
				SuggestionText("-", name, FlagNames(fs)), ErrFlagBeforeCommand)
		}
		if !hasValue && !isBool(f) {
			i++
		}
	}
	return "", args, nil
}
