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
	"strings"
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

// Parse parses args into fs with flags and operands in any order: "outbox
// notify status ID -site X" is "outbox notify status -site X ID". "--"
// ends the flags; what follows is operands even when it starts with "-".
// Afterwards fs.Args() are the operands, as with fs.Parse. An unknown flag
// is reported on fs.Output() with the nearest defined one, then fs.Usage;
// -h and -help give flag.ErrHelp as fs.Parse does. Under a completion
// probe (Probing) nothing is parsed: the flags are written to fs.Output()
// and the error is flag.ErrHelp, so that the command returns at once.
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
		if f == nil && name != "h" && name != "help" && name != "" && !strings.HasPrefix(name, "-") {
			fmt.Fprintf(fs.Output(), "%s: flag provided but not defined: -%s%s\n", fs.Name(), name,
				SuggestionText("-", name, FlagNames(fs)))
			if fs.Usage != nil {
				fs.Usage()
			}
			return fmt.Errorf("%w: -%s", ErrUnknownFlag, name)
		}
		n := 1
		if f != nil && !hasValue && !isBool(f) && len(args) > 1 {
			n = 2
		}
		if err := fs.Parse(args[:n]); err != nil {
			return err
		}
		args = args[n:]
	}
	// Leave the operands where fs.Args() finds them.
	return fs.Parse(append([]string{"--"}, operands...))
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

// FlagNames are the names of fs's flags, sorted.
func FlagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// writeFlags answers a probe with fs's flags, one a line:
// "flag NAME bool|value".
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
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
