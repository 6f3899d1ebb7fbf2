package human

import (
	"testing"
	"time"
)

// TestDuration pins the one way durations are shown, on the page and in
// the CLI alike.
func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 500 * time.Microsecond: "500µs", 250 * time.Millisecond: "250ms",
		850 * time.Millisecond: "850ms", 1500 * time.Millisecond: "1.5s", 4200 * time.Millisecond: "4.2s",
		12 * time.Second: "12s", 42 * time.Second: "42s", 192 * time.Second: "3m12s", 187 * time.Second: "3m07s",
		3 * time.Minute: "3m", 10 * time.Minute: "10m", 59*time.Minute + 50*time.Second: "1h", time.Hour: "1h",
		2*time.Hour + 5*time.Minute + 10*time.Second: "2h05m", 245 * time.Minute: "4h05m", 3 * time.Hour: "3h",
		48 * time.Hour: "2d", 51 * time.Hour: "2d3h", 76 * time.Hour: "3d4h",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := Duration(Seconds(0.25)); got != "250ms" {
		t.Errorf("Duration(Seconds(0.25)) = %q", got)
	}
}

func TestCounts(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1\u202f000", 1234567: "1\u202f234\u202f567", -1234: "-1\u202f234"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Count(1, "notification"); got != "1 notification" {
		t.Errorf("Count(1) = %q", got)
	}
	if got := Count(1234, "notification"); got != "1\u202f234 notifications" {
		t.Errorf("Count(1234) = %q", got)
	}
	if Plural(0, "second") != "seconds" || Plural(1, "second") != "second" {
		t.Error("Plural")
	}
}

func TestCellAndText(t *testing.T) {
	if got := Cell("Oven 3\x1b[31m too hot\u202e", 100); got != "Oven 3 [31m too hot " {
		t.Errorf("Cell = %q", got)
	}
	if got := Cell("héllo world", 5); got != "héllo…" {
		t.Errorf("Cell clipped = %q", got)
	}
	if got := Clip("abc", 3); got != "abc" {
		t.Errorf("Clip = %q", got)
	}
	if got := Text("line 1\nline 2\x1b]0;x\tend"); got != "line 1\nline 2\uFFFD]0;x\tend" {
		t.Errorf("Text = %q", got)
	}
}
