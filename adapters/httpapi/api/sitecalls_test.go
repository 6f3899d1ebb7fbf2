package api

import (
	"net/url"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// FuzzParseSiteCallFilter reads any query string as a site-call filter: a
// filter read is written back (Values) and read again to the same filter,
// holds only known statuses and kinds, and an error names its parameter in
// a bounded message.
func FuzzParseSiteCallFilter(f *testing.F) {
	for _, q := range []string{
		"status=Parked,pending&status=FAILED&site=plant-1&kind=call&target=erp",
		"kind=DatabaseWrite&from=2026-01-02&to=2026-01-02T15:04&updated_from=2026-01-02T15:04:05.123456789%2B02:00&updated_to=2026-01-02T15:04:05",
		"q=+Pump+3+&site=plant%2F2", "kind=teleport", "status=,,&kind=", "from=yesterday", "status=%FF",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		fl, err := ParseSiteCallFilter(v)
		if err != nil {
			if len(err.Error()) > 600 {
				t.Fatalf("ParseSiteCallFilter(%q): an unbounded error of %d bytes", query, len(err.Error()))
			}
			return
		}
		again, err := ParseSiteCallFilter(fl.Values())
		if err != nil {
			t.Fatalf("ParseSiteCallFilter(%q) = %+v, whose Values %q do not parse: %v", query, fl, fl.Values().Encode(), err)
		}
		if !reflect.DeepEqual(again, fl) {
			t.Fatalf("ParseSiteCallFilter(%q) = %+v, read back as %+v", query, fl, again)
		}
		for _, s := range fl.Status {
			if !s.Valid() {
				t.Fatalf("ParseSiteCallFilter(%q) kept the unknown status %q", query, s)
			}
		}
		if fl.Kind != "" && fl.Kind != ports.OpCall && fl.Kind != ports.OpWrite {
			t.Fatalf("ParseSiteCallFilter(%q) kept the unknown kind %q", query, fl.Kind)
		}
		valid := true
		for _, vs := range v {
			for _, s := range vs {
				valid = valid && utf8.ValidString(s)
			}
		}
		for _, s := range []string{fl.Site, fl.Target, fl.Q} {
			if !utf8.ValidString(s) && valid {
				t.Fatalf("ParseSiteCallFilter(%q) made invalid UTF-8 %q", query, s)
			}
		}
		if fl.IsZero() != (fl.Values().Encode() == "") {
			t.Fatalf("ParseSiteCallFilter(%q) = %+v: IsZero %v, but Values %q", query, fl, fl.IsZero(), fl.Values().Encode())
		}
		_ = fl.PortsFilter()
	})
}

// TestParseSiteCallFilterForms: kinds by their names or for short, statuses
// in any case, and an error naming the parameter.
func TestParseSiteCallFilterForms(t *testing.T) {
	f, err := ParseSiteCallFilter(url.Values{"kind": {"WRITE"}, "status": {"parked, failed", "Parked"}, "site": {" plant-1 "}})
	if err != nil || f.Kind != ports.OpWrite || !slices.Equal(f.Status, []ports.OpStatus{ports.OpParked, ports.OpFailed}) || f.Site != "plant-1" {
		t.Errorf("filter %+v, %v", f, err)
	}
	if f, err := ParseSiteCallFilter(url.Values{"kind": {"externalcall"}}); err != nil || f.Kind != ports.OpCall {
		t.Errorf("kind externalcall: %+v, %v", f, err)
	}
	for q, want := range map[string]string{"kind=x": "kind: unknown kind", "status=Lost": "status: unknown status", "to=x": "to: "} {
		v, _ := url.ParseQuery(q)
		if _, err := ParseSiteCallFilter(v); err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("%s: %v, want %q", q, err, want)
		}
	}
}
