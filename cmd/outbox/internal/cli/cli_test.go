package cli

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
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
