// Package errtext turns an error chain into the one sentence an API's
// error body or a node's refusal carries for people. Go errors carry every
// layer's context ("notification X: sqlstore: notification X: not found"),
// which the logs keep; an operator reads the sentence.
package errtext

import (
	"errors"
	"strings"

	"github.com/siteline/outbox/ports"
)

// layerPrefixes are the prefixes the adapters and the core put before
// their errors ("sqlstore: …"): context for the server's log, noise in
// the sentence an operator reads.
var layerPrefixes = map[string]bool{
	"sqlstore": true, "memstore": true, "memdir": true, "membuffer": true, "raftbuffer": true, "core": true,
	"httpapi": true, "siteapi": true, "sitelink": true, "notify": true,
}

// verbs start a context that says what a layer was doing ("get X",
// "delete account") rather than what it was looking for.
var verbs = map[string]bool{
	"get": true, "read": true, "delete": true, "finish": true, "put": true, "create": true, "update": true,
	"find": true, "load": true, "lookup": true, "retry": true, "discard": true, "resolve": true,
}

// sentinels are the ports' errors a body's code already says.
var sentinels = []error{ports.ErrNotFound, ports.ErrInvalid, ports.ErrConflict, ports.ErrUnavailable,
	ports.ErrUnauthenticated, ports.ErrForbidden}

// Sentence is err as the one sentence an API error body carries for
// people. It reads the chain a layer at a time (each fmt.Errorf("ctx:
// %w") adds one context), so a user's value ("secret \"env:X\"") is never
// cut: a layer's prefix ("sqlstore: ") is left out only where a layer's
// context starts, a context repeated by the layer below is said once, and
// the ports' sentinel, which the body's code already says, is dropped —
// except "not found", which ends the sentence and is said of the innermost
// context that names a thing (not a verb's: "get X", "delete account"):
// "retry: notification X: sqlstore: notification X: not found" reads
// "retry: notification X not found"; one that already says so ("site S
// never reported") stands alone. `id "1" is not a UUID: invalid input`
// reads `id "1" is not a UUID`. The error's code (the API's, the gRPC
// status's) stays what machines read.
func Sentence(err error) string {
	contexts, leaf := layers(err)
	var sentinel error
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			continue
		}
		// The sentinel ends the innermost text, alone or joined to a
		// transport's error ("dial tcp …: unavailable").
		if leaf == s.Error() || strings.HasSuffix(leaf, ": "+s.Error()) {
			sentinel, leaf = s, strings.TrimSuffix(strings.TrimSuffix(leaf, s.Error()), ": ")
			break
		}
	}
	if leaf != "" {
		contexts = appendContext(contexts, stripLayers(leaf))
	}
	if len(contexts) == 0 {
		return err.Error()
	}
	if sentinel != ports.ErrNotFound {
		return strings.Join(contexts, ": ")
	}
	// The innermost context that names a thing is what was not found; the
	// contexts inside it (the store's "get X") go.
	what := -1
	for i := len(contexts) - 1; i >= 0 && what < 0; i-- {
		if len(strings.Fields(thing(contexts[i]))) >= 2 {
			what = i
		}
	}
	if what < 0 {
		what = len(contexts) - 1
	}
	// An outer context naming the same kind of thing is the caller's
	// words for it ("site call X of site S" over the store's "site call X
	// of S"): said once, the caller's way.
	kind, _, _ := strings.Cut(thing(contexts[what]), " ")
	for j := range what {
		if k, _, _ := strings.Cut(thing(contexts[j]), " "); k == kind {
			what = j
			break
		}
	}
	name := thing(contexts[what])
	if !strings.Contains(name, " never ") && !strings.Contains(name, " not ") {
		name += " not found"
	}
	return strings.Join(append(contexts[:what:what], name), ": ")
}

// thing is a context without its leading verb: `delete user "bob"` is
// `user "bob"`.
func thing(context string) string {
	if verb, rest, ok := strings.Cut(context, " "); ok && verbs[verb] {
		return rest
	}
	return context
}

// layers splits err's chain into the contexts its layers added, outermost
// first (each split further at ": " outside quotes, a layer's prefix at
// its start dropped), and the innermost error's own text.
func layers(err error) (contexts []string, leaf string) {
	for {
		inner := errors.Unwrap(err)
		text := err.Error()
		if inner == nil || !strings.HasSuffix(text, inner.Error()) {
			return contexts, text
		}
		own := strings.TrimSuffix(strings.TrimSuffix(text, inner.Error()), ": ")
		for _, c := range splitUnquoted(stripLayers(strings.TrimSpace(own))) {
			contexts = appendContext(contexts, c)
		}
		err = inner
	}
}

// stripLayers drops the layers' prefixes at the start of s: "sqlstore:
// get X" is "get X", and "sqlstore" alone is "".
func stripLayers(s string) string {
	for {
		layer, rest, ok := strings.Cut(s, ": ")
		if !ok && layerPrefixes[s] {
			return ""
		}
		if !ok || !layerPrefixes[layer] {
			return s
		}
		s = rest
	}
}

// appendContext appends c unless it is empty or repeats the last one.
func appendContext(contexts []string, c string) []string {
	if c == "" || (len(contexts) > 0 && contexts[len(contexts)-1] == c) {
		return contexts
	}
	return append(contexts, c)
}

// splitUnquoted splits s at each ": " that is outside double quotes.
func splitUnquoted(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == ':' && i+1 < len(s) && s[i+1] == ' ':
			out = append(out, s[start:i])
			start = i + 2
			i++
		}
	}
	return append(out, s[start:])
}
