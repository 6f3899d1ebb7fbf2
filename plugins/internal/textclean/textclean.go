// Package textclean cleans the texts a channel did not write — a receiver's
// answer, an SMTP server's reply — before they reach an error text, which
// central stores and viewers read. The built-in channels share it, so that
// one rule decides what counts as a URL or a path.
package textclean

import "strings"

// Redacted replaces a word that must not be quoted.
const Redacted = "[redacted]"

// LinkLike reports whether a word looks like a URL or a file path: it holds
// "://", "/" or "\". A URL may carry a session or a token, and a path tells
// an outsider about the server's files; neither helps an operator more than
// the rest of the text does.
func LinkLike(word string) bool {
	return strings.ContainsAny(word, `/\`) || strings.Contains(word, "://")
}

// Words returns s on one line, its words (runs without white space)
// separated by single spaces, with every word for which drop reports true
// replaced by Redacted.
func Words(s string, drop func(word string) bool) string {
	words := strings.Fields(s)
	for i, w := range words {
		if drop(w) {
			words[i] = Redacted
		}
	}
	return strings.Join(words, " ")
}
