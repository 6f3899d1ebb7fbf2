package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// newSet is a FlagSet like a command's: a string, a bool, a duration.
func newSet(out *bytes.Buffer) (*flag.FlagSet, *string, *bool, *time.Duration) {
	fs := flag.NewFlagSet("outbox notify status", flag.ContinueOnError)
	fs.SetOutput(out)
	site := fs.String("site", "", "site addresses")
	yes := fs.Bool("yes", false, "act")
	timeout := fs.Duration("timeout", time.Second, "bound")
	return fs, site, yes, timeout
}

func TestParseTakesFlagsAfterAndBetweenArguments(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		operands []string
		site     string
		yes      bool
	}{
		{[]string{"ID", "-site", "X"}, []string{"ID"}, "X", false},
		{[]string{"-site", "X", "ID"}, []string{"ID"}, "X", false},
		{[]string{"A", "--site=X", "B", "-yes", "C"}, []string{"A", "B", "C"}, "X", true},
		{[]string{"SITE", "ID", "-yes"}, []string{"SITE", "ID"}, "", true},
		{[]string{"A", "--", "-yes", "--site"}, []string{"A", "-yes", "--site"}, "", false},
		{[]string{"-yes=false", "-", "B"}, []string{"-", "B"}, "", false},
		{nil, nil, "", false},
	} {
		var out bytes.Buffer
		fs, site, yes, _ := newSet(&out)
		if err := Parse(fs, tt.args); err != nil {
			t.Fatalf("%q: %v\n%s", tt.args, err, out.String())
		}
		if got := fs.Args(); !reflect.DeepEqual(got, tt.operands) && !(len(got) == 0 && len(tt.operands) == 0) {
			t.Errorf("%q: operands %q, want %q", tt.args, got, tt.operands)
		}
		if *site != tt.site || *yes != tt.yes {
			t.Errorf("%q: -site %q -yes %v, want %q %v", tt.args, *site, *yes, tt.site, tt.yes)
		}
	}
}

func TestParseNamesTheNearestFlag(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := newSet(&out)
	err := Parse(fs, []string{"ID", "-sit", "X"})
	if !errors.Is(err, ErrUnknownFlag) {
		t.Fatalf("err %v", err)
	}
	if want := `outbox notify status: flag provided but not defined: -sit (did you mean "-site"?)`; !strings.HasPrefix(out.String(), want) {
		t.Errorf("output %q, want it to start with %q", out.String(), want)
	}
	out.Reset()
	fs, _, _, _ = newSet(&out)
	if err := Parse(fs, []string{"--zzzz"}); !errors.Is(err, ErrUnknownFlag) || strings.Contains(out.String(), "did you mean") {
		t.Errorf("no near flag: %v %q", err, out.String())
	}
	// A bad value and a missing one: the flag package's own errors.
	out.Reset()
	fs, _, _, _ = newSet(&out)
	if err := Parse(fs, []string{"ID", "-timeout", "soon"}); err == nil || !strings.Contains(out.String(), `invalid value "soon" for flag -timeout`) {
		t.Errorf("bad value: %v %q", err, out.String())
	}
	fs, _, _, _ = newSet(&out)
	if err := Parse(fs, []string{"ID", "-site"}); err == nil {
		t.Error("a flag without its value was accepted")
	}
	fs, _, _, _ = newSet(&out)
	if err := Parse(fs, []string{"ID", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestParseAnswersAProbeWithoutParsing(t *testing.T) {
	var out bytes.Buffer
	fs, site, _, _ := newSet(&out)
	if err := Parse(fs, []string{"-site", "X", Probe}); !errors.Is(err, flag.ErrHelp) || *site != "" {
		t.Fatalf("err %v, -site %q", err, *site)
	}
	l := ReadLevel(out.String())
	if want := map[string]bool{"site": true, "yes": false, "timeout": true}; !reflect.DeepEqual(l.Flags, want) {
		t.Errorf("flags %v, want %v", l.Flags, want)
	}
	out.Reset()
	if !Subcommands(&out, []string{Probe}, "send", "status") || ReadLevel(out.String()).Subs[1] != "status" {
		t.Errorf("subcommands %q", out.String())
	}
	if Subcommands(&out, []string{"send", Probe}, "send") {
		t.Error("a probe below the level answered with the level's subcommands")
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"notify", "notifications", "list", "login", "logout", "site", "site-calls", "sites"}
	for typed, want := range map[string]string{
		"notfy": "notify", "notifcations": "notifications", "lst": "list", "lgoin": "login", "sit": "site",
		"site-cals": "site-calls", "zzz": "", "x": "", "notific": "notifications",
	} {
		if got := Suggest(typed, names); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", typed, got, want)
		}
	}
}

func TestComplete(t *testing.T) {
	levels := map[string]Level{
		"":                    {Subs: []string{"notify", "notifications", "help"}, Flags: map[string]bool{}},
		"notify":              {Subs: []string{"send", "status", "health"}},
		"notify status":       {Flags: map[string]bool{"site": true, "timeout": true}},
		"notifications":       {Subs: []string{"list", "retry"}},
		"notifications retry": {Flags: map[string]bool{"yes": false, "status": true}},
	}
	probe := func(path []string) Level { return levels[strings.Join(path, " ")] }
	for _, tt := range []struct {
		words []string
		want  []string
	}{
		{[]string{""}, []string{"help", "notifications", "notify"}},
		{[]string{"not"}, []string{"notifications", "notify"}},
		{[]string{"notify", "st"}, []string{"status"}},
		{[]string{"notify", "status", "ID", "-"}, []string{"-site", "-timeout"}},
		{[]string{"notify", "status", "ID", "--si"}, []string{"-site"}},
		{[]string{"notify", "status", "-site", ""}, nil},       // a value: the shell's files
		{[]string{"notify", "status", "-site", "X", "s"}, nil}, // an operand
		{[]string{"notifications", "retry", "-yes", "-st"}, []string{"-status"}},
		{[]string{"notifications", "retry", "-status", "Parked", "-y"}, []string{"-yes"}},
		{[]string{"frob", ""}, nil},
	} {
		got := Complete(tt.words, probe)
		if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("Complete(%q) = %q, want %q", tt.words, got, tt.want)
		}
	}
}

func TestScript(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		s, err := Script(shell, "outbox")
		if err != nil || !strings.Contains(s, "__complete") {
			t.Errorf("%s: %v\n%s", shell, err, s)
		}
	}
	// Each shell falls back to file names when the binary answers nothing.
	for shell, fallback := range map[string]string{"bash": "-o default", "zsh": "_files", "fish": "__fish_complete_path"} {
		if s, _ := Script(shell, "outbox"); !strings.Contains(s, fallback) {
			t.Errorf("%s: no fallback to file names (%s)\n%s", shell, fallback, s)
		}
	}
	if _, err := Script("tcsh", "outbox"); err == nil {
		t.Error("tcsh: no error")
	}
}

func TestColor(t *testing.T) {
	for _, tt := range []struct {
		environ  []string
		terminal bool
		want     bool
	}{
		{nil, true, true},
		{[]string{"NO_COLOR=1"}, true, false},
		{[]string{"NO_COLOR="}, true, true}, // set but empty: no effect, as no-color.org says
		{nil, false, false},
	} {
		if got := Color(tt.environ, tt.terminal); got != tt.want {
			t.Errorf("Color(%q, %v) = %v", tt.environ, tt.terminal, got)
		}
	}
}

func TestParseValueFlagTakesAFlagLikeValue(t *testing.T) {
	var out bytes.Buffer
	fs, site, yes, _ := newSet(&out)
	if err := Parse(fs, []string{"ID", "-site", "-yes"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if *site != "-yes" || *yes || fs.NArg() != 1 {
		t.Errorf("-site %q -yes %v operands %q: want -site taking -yes as its value", *site, *yes, fs.Args())
	}
}

// TestParseFlagErrorsNameTheCommand pins one prefix for every flag error:
// an unknown flag, a missing value, a bad boolean.
func TestParseFlagErrorsNameTheCommand(t *testing.T) {
	for _, args := range [][]string{{"ID", "-site"}, {"-yes=maybe"}, {"-timeout", "soon"}, {"-zz"}} {
		var out bytes.Buffer
		fs, _, _, _ := newSet(&out)
		fs.Usage = func() { fmt.Fprintln(fs.Output(), "USAGE") }
		if err := Parse(fs, args); err == nil {
			t.Errorf("%q: accepted", args)
		}
		first, _, _ := strings.Cut(out.String(), "\n")
		if !strings.HasPrefix(first, "outbox notify status: ") || !strings.Contains(out.String(), "USAGE") {
			t.Errorf("%q: output %q, want the error after the command's name, then the usage", args, out.String())
		}
	}
}

// TestParseOperandLikeAFlag: a later operand that starts with "-" is
// refused with a hint at --, its text clipped to one short line.
func TestParseOperandLikeAFlag(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := newSet(&out)
	sql := "-- comment\nDELETE FROM t WHERE " + strings.Repeat("x = 1 AND ", 30) + "y = 2"
	err := Parse(fs, []string{"db", sql})
	if !errors.Is(err, ErrUnknownFlag) {
		t.Fatalf("err %v", err)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if !strings.Contains(first, "goes after --") || strings.Contains(first, "y = 2") || len(first) > 200 {
		t.Errorf("first line %q: want a clipped value and a hint at --", first)
	}
	if !strings.HasPrefix(err.Error(), "flag -") {
		t.Errorf("err %q: want the context first", err)
	}
	fs, _, _, _ = newSet(&out)
	if err := Parse(fs, []string{"db", "--", sql}); err != nil || fs.Arg(1) != sql {
		t.Errorf("after --: %v %q", err, fs.Args())
	}
}

func TestRefusedFlagIsNeverOffered(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := newSet(&out)
	Refused(fs, "password", "never")
	if slices.Contains(FlagNames(fs), "password") {
		t.Errorf("FlagNames offers -password: %q", FlagNames(fs))
	}
	if err := Parse(fs, []string{"-passwor", "x"}); err == nil || strings.Contains(out.String(), "did you mean") {
		t.Errorf("a refused flag suggested: %q", out.String())
	}
	out.Reset()
	_ = Parse(fs, []string{Probe})
	if _, ok := ReadLevel(out.String()).Flags["password"]; ok {
		t.Errorf("the probe offers -password: %q", out.String())
	}
	fs, _, _, _ = newSet(&out)
	given := Refused(fs, "password", "never")
	if err := Parse(fs, []string{"-password", "hunter2"}); err != nil || !*given {
		t.Errorf("-password given: %v %v", err, *given)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tt := range []struct {
		args []string
		max  int
		code int
		ok   bool
	}{
		{[]string{"-yes"}, 0, 0, true},
		{[]string{"b.yaml", "-yes"}, 0, ExitUsage, false},
		{[]string{"A", "B"}, 1, ExitUsage, false},
		{[]string{"A", "B"}, AnyOperands, 0, true},
		{[]string{"-h"}, 0, ExitHelp, false},
		{[]string{"-zz"}, 0, ExitUsage, false},
	} {
		var out bytes.Buffer
		fs, _, _, _ := newSet(&out)
		code, ok := ParseArgs(fs, tt.args, tt.max)
		if code != tt.code || ok != tt.ok {
			t.Errorf("%q max %d: %d %v, want %d %v", tt.args, tt.max, code, ok, tt.code, tt.ok)
		}
		if tt.code == ExitUsage && !strings.HasPrefix(out.String(), "outbox notify status: ") {
			t.Errorf("%q: output %q", tt.args, out.String())
		}
	}
}

func TestSplitSubcommand(t *testing.T) {
	for _, tt := range []struct {
		args []string
		sub  string
		rest []string
		err  bool
	}{
		{[]string{"health", "-site", "X"}, "health", []string{"-site", "X"}, false},
		{[]string{"-site", "X", "health"}, "health", []string{"-site", "X"}, false},
		{[]string{"--site=X", "-yes", "health", "ID"}, "health", []string{"--site=X", "-yes", "ID"}, false},
		{[]string{"-site", "health"}, "", []string{"-site", "health"}, false}, // health is -site's value
		{[]string{"-yes", "--", "health"}, "health", []string{"-yes", "--"}, false},
		{[]string{"-h"}, "", []string{"-h"}, false},
		{[]string{"-list", "ops", "send"}, "", nil, true},
		{nil, "", nil, false},
	} {
		var out bytes.Buffer
		fs, _, _, _ := newSet(&out)
		sub, rest, err := SplitSubcommand(fs, tt.args)
		if (err != nil) != tt.err || (tt.err && !errors.Is(err, ErrFlagBeforeCommand)) {
			t.Errorf("%q: err %v", tt.args, err)
			continue
		}
		if tt.err && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%q: %v: no defined flag is near -list", tt.args, err)
		}
		if tt.err {
			continue
		}
		if sub != tt.sub || (!reflect.DeepEqual(rest, tt.rest) && len(rest)+len(tt.rest) > 0) {
			t.Errorf("%q: %q %q, want %q %q", tt.args, sub, rest, tt.sub, tt.rest)
		}
	}
}

// TestSplitSubcommandSuggests: a mistyped flag before the command names
// the nearest flag the command group takes.
func TestSplitSubcommandSuggests(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := newSet(&out)
	_, _, err := SplitSubcommand(fs, []string{"-sit", "x", "health"})
	want := `flag -sit (did you mean "-site"?) before the command: ` + ErrFlagBeforeCommand.Error()
	if !errors.Is(err, ErrFlagBeforeCommand) || err.Error() != want {
		t.Fatalf("err %v, want %q", err, want)
	}
}
