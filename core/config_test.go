package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

func TestConfigDefaultsAreTheDocumentedOnes(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.DispatchInterval != 10*time.Second || c.DispatchBatchSize != 100 || c.StuckAgeThreshold != 10*time.Minute ||
		c.TerminalRetention != 365*24*time.Hour || c.PurgeInterval != 24*time.Hour || c.DeliveredKpiWindow != time.Minute {
		t.Fatalf("defaults differ from the ones the fields document: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestConfigValidateNamesEveryBrokenRule(t *testing.T) {
	c := Config{DispatchInterval: -time.Second, DispatchBatchSize: 20000, DeliveryTimeout: time.Minute,
		ClaimLease: time.Minute, MaxBodyBytes: -1}.WithDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"DispatchInterval: must be positive", "DispatchBatchSize: must be at most 10000",
		"ClaimLease: 1m0s must exceed DeliveryTimeout (1m0s)", "MaxBodyBytes: must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Each broken rule names its field, for a loader to map to its key.
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *ports.FieldError
		if !errors.As(e, &fe) || !errors.Is(e, ports.ErrInvalid) {
			t.Errorf("%v: not a *ports.FieldError", e)
		}
	}
}

func TestConfigValidateRefusesZerosAndOddNodeIDs(t *testing.T) {
	// Validate checks c as given: a zero is a value, which New never
	// passes it (it fills the defaults first).
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "DispatchInterval: must be positive, got 0s") {
		t.Errorf("zero config: %v", err)
	}
	for _, id := range []string{"a/b", "a b", strings.Repeat("n", 65)} {
		if err := (Config{NodeID: id}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "NodeID: ") {
			t.Errorf("node id %q: %v", id, err)
		}
	}
	if err := (Config{NodeID: "central-1.plant:a_b"}).WithDefaults().Validate(); err != nil {
		t.Errorf("a good node id: %v", err)
	}
}
