package core

import (
	"strings"
	"testing"
	"time"
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
	for _, want := range []string{"DispatchInterval must be positive", "DispatchBatchSize must be at most 10000",
		"ClaimLease (1m0s) must exceed DeliveryTimeout (1m0s)", "MaxBodyBytes must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
