package core

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func TestFixedRetryParksAtTheLimit(t *testing.T) {
	p := FixedRetry{MaxRetries: 3, Interval: 30 * time.Second}
	for failures := 1; failures < 3; failures++ {
		d, ok := p.Next(failures)
		if !ok || d != 30*time.Second {
			t.Fatalf("Next(%d) = %s, %v; want 30s, true", failures, d, ok)
		}
	}
	if _, ok := p.Next(3); ok {
		t.Fatal("Next(3) with MaxRetries 3 must park")
	}
}

func TestExponentialRetryDoublesWithJitterUpToTheCap(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999} {
		p := ExponentialRetry{MaxRetries: 20, Interval: time.Second, MaxInterval: 10 * time.Second,
			Rand: func() float64 { return r }}
		for failures, nominal := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
			4: 8 * time.Second, 5: 10 * time.Second, 15: 10 * time.Second} {
			d, ok := p.Next(failures)
			if !ok {
				t.Fatalf("Next(%d) parked before the limit", failures)
			}
			if d < nominal/2 || d > nominal {
				t.Errorf("rand %v: Next(%d) = %s, want within [%s, %s]", r, failures, d, nominal/2, nominal)
			}
		}
		if _, ok := p.Next(20); ok {
			t.Error("Next(20) with MaxRetries 20 must park")
		}
	}
}

func TestNewRetryPolicyClampsNegativeSettingsWithAWarning(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	p := NewRetryPolicy(ports.RetrySettings{MaxRetries: -1, Interval: -time.Second}, "email", log)
	fixed, ok := p.(FixedRetry)
	if !ok || fixed.MaxRetries != FallbackMaxRetries || fixed.Interval != FallbackInterval {
		t.Fatalf("got %#v, want FixedRetry{10, 1m}", p)
	}
	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "max retries") || !strings.Contains(out, "interval") {
		t.Fatalf("want warnings naming max retries and interval, got:\n%s", out)
	}

	// A channel without a settings row has zero retry settings: the
	// defaults, without a word.
	buf.Reset()
	p = NewRetryPolicy(ports.RetrySettings{}, "webhook", log)
	if fixed, ok := p.(FixedRetry); !ok || fixed.MaxRetries != FallbackMaxRetries || fixed.Interval != FallbackInterval {
		t.Fatalf("unset settings: got %#v, want FixedRetry{10, 1m}", p)
	}
	if buf.Len() != 0 {
		t.Fatalf("unset settings must not warn, got:\n%s", buf.String())
	}

	buf.Reset()
	p = NewRetryPolicy(ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 5, Interval: time.Second}, "webhook", log)
	exp, ok := p.(ExponentialRetry)
	if !ok || exp.MaxRetries != 5 || exp.MaxInterval != 100*time.Second {
		t.Fatalf("got %#v, want ExponentialRetry with MaxInterval 100s", p)
	}
	if buf.Len() != 0 {
		t.Fatalf("valid settings must not warn, got:\n%s", buf.String())
	}
}
