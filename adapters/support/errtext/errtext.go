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

// Sentence is err as the one sentence an API error body carries for
// people: the layers' prefixes left out, a context repeated by the layer
// below said once, and the ports' sentinel, which the body's code already
// says, dropped — except "not found", which ends the sentence:
// "notification X: sqlstore: notification X: not found" reads
// "notification X not found" (the outermost context, what was asked for,
// is what was not found; one that already says so, "site S never
// reported", stands alone), `id "1" is not a UUID: invalid input` reads
// `id "1" is not a UUID`. The error's code (the API's, the gRPC status's)
// stays what machines read.
func Sentence(err error) string {
	parts := strings.Split(err.Error(), ": ")
	var kept []string
	for _, p := range parts {
		if layerPrefixes[p] || (len(kept) > 0 && kept[len(kept)-1] == p) {
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return err.Error()
	}
	if len(kept) == 1 {
		return kept[0]
	}
	last := kept[len(kept)-1]
	for _, s := range []error{ports.ErrNotFound, ports.ErrInvalid, ports.ErrConflict, ports.ErrUnavailable,
		ports.ErrUnauthenticated, ports.ErrForbidden} {
		if last != s.Error() || !errors.Is(err, s) {
			continue
		}
		if s == ports.ErrNotFound {
			if first := kept[0]; strings.Contains(first, " never ") || strings.Contains(first, " not ") {
				return first
			}
			return kept[0] + " not found"
		}
		return strings.Join(kept[:len(kept)-1], ": ")
	}
	return strings.Join(kept, ": ")
}
