package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultCheckTimeout bounds each readiness check when HealthHandler is
// given no timeout.
const DefaultCheckTimeout = 5 * time.Second

// Check is one named readiness check: the store answers, the plugins run, …
type Check struct {
	// Name names the check in /readyz's body; names should be unique.
	Name string
	// Check returns nil when the dependency is ready. It must return soon
	// after ctx is done (the check's timeout). Its error text is served to
	// whoever asks /readyz, so it must not hold a secret, an address or a
	// connection string.
	Check func(ctx context.Context) error
}

// CheckResult is one check's entry in /readyz's body.
type CheckResult struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Error is the check's error text, absent when OK.
	Error string `json:"error,omitempty"`
}

// Readiness is /readyz's JSON body.
type Readiness struct {
	// Ready is true when every check passed.
	Ready  bool          `json:"ready"`
	Checks []CheckResult `json:"checks"`
}

// HealthHandler returns an http.Handler serving
//
//   - GET /healthz, liveness: 200 "ok" for as long as the process serves
//     HTTP; it runs no check.
//   - GET /readyz, readiness: runs every check at once, each bounded by
//     timeout (DefaultCheckTimeout when not positive), and answers 200 when
//     all passed and 503 otherwise, with a [Readiness] JSON body listing each
//     check in the order given.
//
// With no checks, /readyz answers 200.
func HealthHandler(timeout time.Duration, checks ...Check) http.Handler {
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	checks = append([]Check(nil), checks...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := ready(r.Context(), timeout, checks)
		body, err := json.Marshal(rd)
		if err != nil { // only plain strings and bools: cannot happen
			http.Error(w, "encode readiness", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rd.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write(append(body, '\n'))
	})
	return mux
}

// ready runs checks concurrently and waits for them all.
func ready(ctx context.Context, timeout time.Duration, checks []Check) Readiness {
	rd := Readiness{Ready: true, Checks: make([]CheckResult, len(checks))}
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rd.Checks[i] = CheckResult{Name: c.Name, OK: true}
			if err := runCheck(cctx, c); err != nil {
				if errors.Is(cctx.Err(), context.DeadlineExceeded) {
					err = fmt.Errorf("timeout %v: %w", timeout, err)
				}
				rd.Checks[i].OK, rd.Checks[i].Error = false, err.Error()
			}
		})
	}
	wg.Wait()
	for _, c := range rd.Checks {
		rd.Ready = rd.Ready && c.OK
	}
	return rd
}

// runCheck runs one check, turning a panic into a failure.
func runCheck(ctx context.Context, c Check) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("check panicked: %v", r)
		}
	}()
	if c.Check == nil {
		return fmt.Errorf("check %q has no function", c.Name)
	}
	return c.Check(ctx)
}
