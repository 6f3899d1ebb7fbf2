package api

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// TestParseThroughputAlignsBuckets: both ends of the window fall on whole
// buckets, whatever the window, so that a bucket of an hour is an hour on
// the clock; an end past MaxThroughputEndYear and an undocumented split
// are refused.
func TestParseThroughputAlignsBuckets(t *testing.T) {
	now := time.Date(2026, 6, 2, 10, 20, 30, 0, time.UTC)
	hm := func(h, m int) time.Time { return time.Date(2026, 6, 2, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		query    string
		from, to time.Time
		buckets  int
	}{
		{"window=90m&bucket=1h", hm(9, 0), hm(11, 0), 2},
		{"window=1h", hm(9, 21), hm(10, 21), 60},
		{"window=25m&bucket=10m", hm(10, 0), hm(10, 30), 3},
		{"window=2h&bucket=1h&end=2026-06-02T10:00:00Z", hm(8, 0), hm(10, 0), 2},
		{"window=7d&by=site", hm(11, 0).Add(-7 * 24 * time.Hour), hm(11, 0), 168},
	} {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseThroughput(v, now)
		if err != nil {
			t.Errorf("%s: %v", c.query, err)
			continue
		}
		if !q.From.Equal(c.from) || !q.To.Equal(c.to) || q.Buckets() != c.buckets {
			t.Errorf("%s: %s to %s in %d buckets, want %s to %s in %d", c.query, q.From, q.To, q.Buckets(), c.from, c.to, c.buckets)
		}
	}
	for query, want := range map[string]string{
		"end=2263-01-01T00:00:00Z":           "out of range (1970 to 2200)",
		"end=2201-01-01T00:00:00Z&window=1h": "out of range (1970 to 2200)",
		"end=1969-12-31T23:00:00Z":           "out of range (1970 to 2200)",
		"by=total":                           `by: "total" is not site or type`,
		"by=all":                             `by: "all" is not site or type`,
		"by=SITE":                            `by: "SITE" is not site or type`,
	} {
		v, _ := url.ParseQuery(query)
		if _, err := ParseThroughput(v, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", query, err, want)
		}
	}
}

// FuzzParseThroughput: whatever the query and the clock, an accepted query
// is valid for a store, its buckets are whole buckets of Unix time, and its
// window covers the one asked for, ending at the end asked for (or now)
// rounded up by less than a bucket.
func FuzzParseThroughput(f *testing.F) {
	for _, q := range []string{"window=90m&bucket=1h", "window=31d&bucket=1h", "window=7d&bucket=7s",
		"end=2200-12-31T23:59:59Z&window=31d", "end=2262-04-12T00:00:00Z", "end=1970-01-01T00:00:00Z&window=1h",
		"window=1000m&bucket=1m", "window=999m30s&bucket=1m", "bucket=1h&window=1h", "by=type&site=a&type=b"} {
		f.Add(q, int64(1780000000))
	}
	f.Fuzz(func(t *testing.T, query string, nowUnix int64) {
		now := time.Unix(nowUnix%(200*365*24*3600), 0).UTC()
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		q, err := ParseThroughput(v, now)
		if err != nil {
			return
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("%s: accepted %+v, which a store refuses: %v", query, q, err)
		}
		b := q.Bucket.Microseconds()
		if q.From.UnixMicro()%b != 0 || q.To.UnixMicro()%b != 0 {
			t.Fatalf("%s: %s to %s is not in whole buckets of %s", query, q.From, q.To, q.Bucket)
		}
		if n := q.Buckets(); n < 1 || n > ports.MaxThroughputBuckets || q.To.Sub(q.From) != time.Duration(n)*q.Bucket {
			t.Fatalf("%s: %d buckets of %s from %s to %s", query, n, q.Bucket, q.From, q.To)
		}
		end := now
		if s := v.Get(ParamEnd); strings.TrimSpace(s) != "" {
			e, err := parseTimeParam(v, ParamEnd)
			if err != nil || e == nil {
				t.Fatalf("%s: accepted an end it cannot read: %v", query, err)
			}
			end = *e
		}
		if q.To.Before(end) || q.To.Sub(end) >= q.Bucket {
			t.Fatalf("%s: ends at %s for an end of %s", query, q.To, end)
		}
		window := time.Hour
		if s := v.Get(ParamWindow); strings.TrimSpace(s) != "" {
			window, _ = ParseWindow(s)
		}
		if got := q.To.Sub(q.From); got < window || got >= window+2*q.Bucket {
			t.Fatalf("%s: a window of %s for %s asked, in buckets of %s", query, got, window, q.Bucket)
		}
	})
}
