package cli

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// Level is what a command path ("notify", "notify send") takes: its
// subcommands and its flags, as a probe answered them.
type Level struct {
	Subs []string
	// Flags maps a flag's name to whether it takes a value.
	Flags map[string]bool
}

// ReadLevel reads a probe's answer (see Parse and Subcommands); other
// lines are ignored.
func ReadLevel(out string) Level {
	l := Level{Flags: map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch {
		case len(f) == 2 && f[0] == "sub":
			l.Subs = append(l.Subs, f[1])
		case len(f) == 3 && f[0] == "flag":
			l.Flags[f[1]] = f[2] == "value"
		}
	}
	return l
}

// Complete returns the completions of the last of words, the words after
// the binary's name up to the cursor (the last one may be ""). probe
// answers what a path of subcommands takes; the empty path is the
// binary's own commands. Subcommands are completed until the first
// operand, flags (as -name) when the word starts with "-". After a flag
// that takes a value, Complete returns nothing: the shell completes file
// names.
func Complete(words []string, probe func(path []string) Level) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	var path []string
	level := probe(path)
	operand := false
	for i := 0; i < len(words)-1; i++ {
		w := words[i]
		switch {
		case w == "--":
			operand = true
		case !operand && len(w) > 1 && w[0] == '-':
			name, hasValue := flagName(w)
			if level.Flags[name] && !hasValue {
				i++ // its value
			}
		case !operand && slices.Contains(level.Subs, w):
			path = append(path, w)
			level = probe(path)
		default:
			operand = true
		}
	}
	cur := words[len(words)-1]
	if n := len(words); n >= 2 && !operand {
		if prev := words[n-2]; len(prev) > 1 && prev[0] == '-' && prev != "--" {
			if name, hasValue := flagName(prev); level.Flags[name] && !hasValue {
				return nil
			}
		}
	}
	var out []string
	switch {
	case strings.HasPrefix(cur, "-"):
		for name := range level.Flags {
			if f := "-" + name; strings.HasPrefix(f, cur) || strings.HasPrefix("-"+f, cur) {
				out = append(out, f)
			}
		}
	case !operand:
		for _, s := range level.Subs {
			if strings.HasPrefix(s, cur) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Script returns the completion script for shell (bash, zsh or fish) of
// the binary named bin: it asks the binary as typed (`bin __complete
// WORDS...`, or `./bin ...`) for the answers, so that they come from the
// binary that parses them. It completes bin on the PATH and ./bin, the
// binary built in the current directory.
func Script(shell, bin string) (string, error) {
	switch shell {
	case "bash":
		return fmt.Sprintf(`# bash completion for %[1]s: source <(%[1]s completion bash)
_%[1]s_complete() {
    local IFS=$'\n'
    COMPREPLY=($("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _%[1]s_complete %[1]s ./%[1]s
`, bin), nil
	case "zsh":
		return fmt.Sprintf(`#compdef %[1]s
# zsh completion for %[1]s: source <(%[1]s completion zsh), after compinit
_%[1]s_complete() {
    local -a answers
    answers=("${(@f)$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    answers=(${answers:#})
    if (( ${#answers} == 0 )); then
        _files
        return
    fi
    compadd -- "${answers[@]}"
}
compdef _%[1]s_complete %[1]s ./%[1]s
`, bin), nil
	case "fish":
		// fish matches -c by the command's base name, ./outbox too, and
		// asks the binary as typed. -f keeps fish's file names out of the
		// binary's answers; when there are none (a flag's value, an
		// operand), the function falls back to the paths, as bash's -o
		// default and zsh's _files do.
		return fmt.Sprintf(`# fish completion for %[1]s: %[1]s completion fish | source
function __%[1]s_complete
    set -l words (commandline -opc)
    set -l answers ($words[1] __complete $words[2..-1] (commandline -ct) 2>/dev/null)
    if test (count $answers) -eq 0
        __fish_complete_path (commandline -ct)
        return
    end
    printf '%%s\n' $answers
end
complete -c %[1]s -f -a '(__%[1]s_complete)'
`, bin), nil
	}
	return "", fmt.Errorf("unknown shell %q (bash, zsh or fish)", shell)
}
