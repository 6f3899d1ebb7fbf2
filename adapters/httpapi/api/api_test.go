package api

import (
	"net/url"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// FuzzParseFilter reads any query string as a filter and its paging: a
// filter read is written back (Values) and read again to the same filter,
// and an error names its parameter in a bounded message.
func FuzzParseFilter(f *testing.F) {
	for _, q := range []string{
		"status=Parked,pending&status=DELIVERED&type=email&site=plant-1&list=ops",
		"from=2026-01-02&to=2026-01-02T15:04&updated_from=2026-01-02T15:04:05.123456789%2B02:00&updated_to=2026-01-02T15:04:05",
		"stuck=on&q=+Pump+3+&limit=20&after=m1.abc",
		"status=,,&stuck=maybe", "from=yesterday", "limit=-1", "status=%FF",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		if _, _, err := ParsePage(v); err != nil && len(err.Error()) > 600 {
			t.Fatalf("ParsePage(%q): an unbounded error of %d bytes", query, len(err.Error()))
		}
		fl, err := ParseFilter(v)
		if err != nil {
			if len(err.Error()) > 600 {
				t.Fatalf("ParseFilter(%q): an unbounded error of %d bytes", query, len(err.Error()))
			}
			return
		}
		again, err := ParseFilter(fl.Values())
		if err != nil {
			t.Fatalf("ParseFilter(%q) = %+v, whose Values %q do not parse: %v", query, fl, fl.Values().Encode(), err)
		}
		if !reflect.DeepEqual(again, fl) {
			t.Fatalf("ParseFilter(%q) = %+v, read back as %+v", query, fl, again)
		}
		for _, s := range []string{fl.Type, fl.Site, fl.List, fl.Q} {
			if !utf8.ValidString(s) && utf8.ValidString(query) {
				t.Fatalf("ParseFilter(%q) made invalid UTF-8 %q", query, s)
			}
		}
		_, _ = fl.PortsFilter()
	})
}

// TestTargetsSummary counts the delivered targets of those the list holds:
// a Dropped one is not counted; no states, no summary.
func TestTargetsSummary(t *testing.T) {
	ts := []TargetState{{Status: ports.TargetDelivered}, {Status: ports.TargetFailed}, {Status: ports.TargetDropped},
		{Status: ports.TargetRetrying}, {Status: ports.TargetDelivered}}
	if got := TargetsSummary(ts); got != "2 of 4 delivered" {
		t.Errorf("TargetsSummary = %q, want 2 of 4 delivered", got)
	}
	if got := TargetsSummary(nil); got != "" {
		t.Errorf("TargetsSummary(nil) = %q, want none", got)
	}
}
