// Package human formats numbers, durations and untrusted text for people:
// the operator page and the operator CLI show the same values the same way
// through it. It is pure: no I/O, no state.
package human

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Duration says d the way people say it, with its two largest units,
// rounded: 250ms, 4.2s, 42s, 3m12s, 10m, 4h05m, 3d4h. Zero and less is
// "0s".
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Minute-time.Second/2:
		return d.Round(time.Second).String()
	case d < time.Hour-30*time.Second:
		s := int64(d.Round(time.Second) / time.Second)
		return two(s/60, "m", s%60, "s", true)
	case d < 24*time.Hour-30*time.Minute:
		m := int64(d.Round(time.Minute) / time.Minute)
		return two(m/60, "h", m%60, "m", true)
	default:
		h := int64(d.Round(time.Hour) / time.Hour)
		return two(h/24, "d", h%24, "h", false)
	}
}

// two writes a value in two units, leaving out a zero second one; pad
// writes the second one with two digits.
func two(a int64, ua string, b int64, ub string, pad bool) string {
	switch {
	case b == 0:
		return fmt.Sprintf("%d%s", a, ua)
	case pad:
		return fmt.Sprintf("%d%s%02d%s", a, ua, b, ub)
	}
	return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
}

// Seconds is a duration given in seconds on the wire, as a time.Duration.
func Seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// Thousands writes n with narrow no-break spaces between thousands:
// 1 234 567.
func Thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	if len(digits) < len(s) {
		b.WriteByte('-')
	}
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Plural is noun for one, noun+"s" for any other number.
func Plural(n int64, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// Count writes n and its noun: "1 notification", "1 234 notifications".
func Count(n int64, noun string) string {
	return Thousands(n) + " " + Plural(n, noun)
}

// Clip shortens s to at most max characters, marking a cut with "…".
func Clip(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// Cell makes s safe for one table cell on a terminal: control and bidi
// characters (a subject could carry terminal escapes) become spaces, and it
// is clipped to max characters.
func Cell(s string, max int) string {
	return Clip(strings.Map(func(c rune) rune {
		if unsafe(c) {
			return ' '
		}
		return c
	}, s), max)
}

// Text makes a text of several lines safe for a terminal: newlines and tabs
// stay, other control and bidi characters become U+FFFD.
func Text(s string) string {
	return strings.Map(func(c rune) rune {
		if c != '\n' && c != '\t' && unsafe(c) {
			return '\uFFFD'
		}
		return c
	}, s)
}

// unsafe reports whether c can move a terminal's cursor or reorder text.
func unsafe(c rune) bool {
	return unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c)
}
