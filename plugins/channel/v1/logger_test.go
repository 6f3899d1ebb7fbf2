package channel

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestLoggerWritesDurationsWithTheirUnit: a plugin's JSON line carries a
// duration as text with its unit, in a group too, not as a bare number of
// nanoseconds that central's log would pass on as "took":197226.
func TestLoggerWritesDurationsWithTheirUnit(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf).Info("HTTP delivery attempt", slog.Duration("took", 197226*time.Nanosecond),
		slog.Group("retry", slog.Duration("after", 90*time.Second)), slog.Int("status", 200))
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if raw["took"] != "197.226µs" || raw["retry"].(map[string]any)["after"] != "1m30s" || raw["status"] != float64(200) {
		t.Errorf("durations are not written with their unit: %s", buf.String())
	}
	if raw["@level"] != "info" || raw["@message"] != "HTTP delivery attempt" {
		t.Errorf("the line lost hclog's key names: %s", buf.String())
	}
}
