package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func readiness(t *testing.T, rec *httptest.ResponseRecorder) Readiness {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var rd Readiness
	if err := json.Unmarshal(rec.Body.Bytes(), &rd); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return rd
}

func pass(context.Context) error { return nil }

func TestHealthz(t *testing.T) {
	h := HealthHandler(time.Second, Check{Name: "store", Check: func(context.Context) error {
		return errors.New("down")
	}})
	rec := get(t, h, "/healthz")
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n" {
		t.Errorf("/healthz: %d %q; liveness does not depend on the checks", rec.Code, rec.Body)
	}
}

func TestReadyzAllPassing(t *testing.T) {
	h := HealthHandler(time.Second, Check{Name: "store", Check: pass}, Check{Name: "plugins", Check: pass})
	rec := get(t, h, "/readyz")
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz answered %d: %s", rec.Code, rec.Body)
	}
	rd := readiness(t, rec)
	if !rd.Ready || len(rd.Checks) != 2 || rd.Checks[0] != (CheckResult{Name: "store", OK: true}) ||
		rd.Checks[1] != (CheckResult{Name: "plugins", OK: true}) {
		t.Errorf("readiness %+v", rd)
	}
}

func TestReadyzOneFailing(t *testing.T) {
	h := HealthHandler(time.Second,
		Check{Name: "store", Check: pass},
		Check{Name: "plugins", Check: func(context.Context) error { return errors.New("plugin email is down") }})
	rec := get(t, h, "/readyz")
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d, want 503", rec.Code)
	}
	rd := readiness(t, rec)
	want := []CheckResult{{Name: "store", OK: true}, {Name: "plugins", Error: "plugin email is down"}}
	if rd.Ready || len(rd.Checks) != 2 || rd.Checks[0] != want[0] || rd.Checks[1] != want[1] {
		t.Errorf("readiness %+v, want not ready with %+v", rd, want)
	}
}

// TestReadyzBoundsEachCheck: a check that waits for its context ends at
// the timeout and fails, naming the timeout; a panicking check fails too.
func TestReadyzBoundsEachCheck(t *testing.T) {
	h := HealthHandler(50*time.Millisecond,
		Check{Name: "slow", Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		Check{Name: "broken", Check: func(context.Context) error { panic("nil map") }})
	start := time.Now()
	rec := get(t, h, "/readyz")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("/readyz took %v", took)
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d, want 503", rec.Code)
	}
	rd := readiness(t, rec)
	if len(rd.Checks) != 2 || rd.Checks[0].OK || rd.Checks[0].Error != "timeout 50ms: context deadline exceeded" ||
		rd.Checks[1].OK || rd.Checks[1].Error != "check panicked: nil map" {
		t.Errorf("readiness %+v", rd)
	}
}

func TestReadyzWithoutChecks(t *testing.T) {
	rec := get(t, HealthHandler(0), "/readyz")
	if rec.Code != http.StatusOK || !readiness(t, rec).Ready {
		t.Errorf("/readyz without checks: %d %s", rec.Code, rec.Body)
	}
}
