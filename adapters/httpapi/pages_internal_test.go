package httpapi

import (
	"testing"
	"time"
)

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 850 * time.Millisecond: "850ms", 1500 * time.Millisecond: "1.5s", 12 * time.Second: "12s",
		192 * time.Second: "3m12s", 10 * time.Minute: "10m", 245 * time.Minute: "4h05m", 3 * time.Hour: "3h",
		51 * time.Hour: "2d3h",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := thousands(1234567); got != "1\u202f234\u202f567" {
		t.Errorf("thousands = %q", got)
	}
}
