package api

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/ports"
)

// The query parameters of GET /throughput (besides ParamSite and
// ParamType, which keep only one site's or one type's rows).
const (
	// ParamWindow is the trailing window: a Go duration (90m, 24h) or a
	// number of days (7d). Default 1h; at most 31d. Its start is rounded
	// down to a whole bucket, like its end is rounded up, so that every
	// bucket starts on a multiple of the bucket (of Unix time): 90m in
	// buckets of 1h is two buckets, not one that starts at half past.
	ParamWindow = "window"
	// ParamBucket is each bucket's length, a whole number of seconds as a
	// Go duration (1m, 1h). Default 1m for windows up to 6h, 1h beyond.
	ParamBucket = "bucket"
	// ParamBy splits the counts: site or type; empty (or absent) for the
	// total. No other value is accepted.
	ParamBy = "by"
	// ParamEnd is the end of the window (RFC 3339); default now; from 1970
	// to MaxThroughputEndYear. It is rounded up to a whole bucket, so that
	// buckets start on the minute or the hour and the last one is the one
	// in progress.
	ParamEnd = "end"
)

// MaxThroughputEndYear is the last year ParamEnd accepts: far from the
// year 2262, where time.Duration's nanoseconds since 1970 run out.
const MaxThroughputEndYear = 2200

// MaxThroughputWindow is the longest window GET /throughput reads.
const MaxThroughputWindow = 31 * 24 * time.Hour

// Throughput is GET /throughput: delivered, failed and parked per bucket,
// one series per key.
type Throughput struct {
	From          time.Time `json:"from"`
	To            time.Time `json:"to"`
	BucketSeconds float64   `json:"bucket_seconds"`
	// By is "site", "type" or "" (one series, key "").
	By     string             `json:"by"`
	Series []ThroughputSeries `json:"series"`
}

// ThroughputSeries is one key's buckets, oldest first: the i-th element of
// Delivered, Failed and Parked is bucket i, which starts at
// From + i*BucketSeconds.
type ThroughputSeries struct {
	Key       string           `json:"key"`
	Delivered []int64          `json:"delivered"`
	Failed    []int64          `json:"failed"`
	Parked    []int64          `json:"parked"`
	Total     ThroughputCounts `json:"total"`
}

// ThroughputCounts are the outcomes of one series: delivered rows, failed
// attempts (the row stayed Retrying), rows parked.
type ThroughputCounts struct {
	Delivered int64 `json:"delivered"`
	Failed    int64 `json:"failed"`
	Parked    int64 `json:"parked"`
}

// FromThroughput is a throughput answer in wire form.
func FromThroughput(t ports.Throughput, by ports.ThroughputGroup) Throughput {
	out := Throughput{From: t.From.UTC(), To: t.To.UTC(), BucketSeconds: t.Bucket.Seconds(), By: string(by),
		Series: make([]ThroughputSeries, len(t.Series))}
	for i, s := range t.Series {
		ws := ThroughputSeries{Key: s.Key, Delivered: make([]int64, len(s.Buckets)), Failed: make([]int64, len(s.Buckets)),
			Parked: make([]int64, len(s.Buckets)),
			Total:  ThroughputCounts{Delivered: s.Total.Delivered, Failed: s.Total.Failed, Parked: s.Total.Parked}}
		for j, b := range s.Buckets {
			ws.Delivered[j], ws.Failed[j], ws.Parked[j] = b.Delivered, b.Failed, b.Parked
		}
		out.Series[i] = ws
	}
	return out
}

// ParseWindow reads a window: a Go duration or a number of days ("7d").
func ParseWindow(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 366 {
			return 0, fmt.Errorf("%q is not a number of days such as 7d", clip(s))
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration such as 1h or 7d", clip(s))
	}
	return d, nil
}

// ParseThroughput reads a throughput query from query parameters (see
// ParamWindow, ParamBucket, ParamBy, ParamEnd, ParamSite, ParamType), now
// being the default end. The window is at most MaxThroughputWindow and
// ports.MaxThroughputBuckets buckets. Errors name the parameter.
func ParseThroughput(v url.Values, now time.Time) (ports.ThroughputQuery, error) {
	var q ports.ThroughputQuery
	window := time.Hour
	if s := strings.TrimSpace(v.Get(ParamWindow)); s != "" {
		d, err := ParseWindow(s)
		if err != nil {
			return q, fmt.Errorf("%s: %w", ParamWindow, err)
		}
		window = d
	}
	if window > MaxThroughputWindow || window < time.Minute {
		return q, fmt.Errorf("%s: %s is out of range (1m to 31d)", ParamWindow, window)
	}
	q.Bucket = time.Minute
	if window > 6*time.Hour {
		q.Bucket = time.Hour
	}
	if s := strings.TrimSpace(v.Get(ParamBucket)); s != "" {
		d, err := ParseWindow(s)
		if err != nil {
			return q, fmt.Errorf("%s: %w", ParamBucket, err)
		}
		if d < time.Second || d%time.Second != 0 || d > window {
			return q, fmt.Errorf("%s: %s is not a whole number of seconds within the window", ParamBucket, d)
		}
		q.Bucket = d
	}
	end, err := parseTimeParam(v, ParamEnd)
	if err != nil {
		return q, err
	}
	q.To = now
	if end != nil {
		q.To = *end
	}
	if y := q.To.Year(); y < 1970 || y > MaxThroughputEndYear {
		return q, fmt.Errorf("%s: %s is out of range (1970 to %d)", ParamEnd, q.To.UTC().Format(time.RFC3339), MaxThroughputEndYear)
	}
	// Round the end up and the start down to whole buckets (of Unix
	// time), in microseconds: a bucket is whole seconds.
	b := q.Bucket.Microseconds()
	to := q.To.UnixMicro()
	if r := to % b; r != 0 {
		to += b - r
	}
	from := to - window.Microseconds()
	from -= (from%b + b) % b
	q.To, q.From = time.UnixMicro(to).UTC(), time.UnixMicro(from).UTC()
	if n := q.Buckets(); n > ports.MaxThroughputBuckets {
		return q, fmt.Errorf("%s: %d buckets of %s in %s, at most %d", ParamBucket, n, q.Bucket, window, ports.MaxThroughputBuckets)
	}
	q.Site = strings.TrimSpace(v.Get(ParamSite))
	q.Type = strings.TrimSpace(v.Get(ParamType))
	switch by := strings.TrimSpace(v.Get(ParamBy)); by {
	case "":
	case string(ports.ThroughputBySite), string(ports.ThroughputByType):
		q.By = ports.ThroughputGroup(by)
	default:
		return q, fmt.Errorf("%s: %q is not site or type (omit it for the total)", ParamBy, clip(by))
	}
	return q, nil
}
