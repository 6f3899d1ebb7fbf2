package ports

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ThroughputGroup says how Store.Throughput splits its counts into series.
type ThroughputGroup string

const (
	// ThroughputTotal is one series over every row (key "").
	ThroughputTotal ThroughputGroup = ""
	// ThroughputBySite is one series per source site (key: the site).
	ThroughputBySite ThroughputGroup = "site"
	// ThroughputByType is one series per channel type (key: the type).
	ThroughputByType ThroughputGroup = "type"
)

// MaxThroughputBuckets bounds how many buckets one throughput query asks
// for: a week of hours is 168, an hour of minutes 60.
const MaxThroughputBuckets = 1000

// ThroughputQuery asks Store.Throughput for the delivery outcomes of a time
// window, counted in buckets of equal length.
type ThroughputQuery struct {
	// From (inclusive) and To (exclusive) bound the instants counted.
	From, To time.Time
	// Bucket is each bucket's length: a positive whole number of seconds.
	// Bucket i holds [From+i*Bucket, From+(i+1)*Bucket), the last one cut
	// at To; there are ceil((To-From)/Bucket) of them, at most
	// MaxThroughputBuckets.
	Bucket time.Duration
	// Site and Type, when set, keep only the rows of that source site and
	// that channel type.
	Site, Type string
	// By splits the counts into one series per site or per type.
	By ThroughputGroup
	// DeliveredOnly counts the delivered rows alone (Failed and Parked
	// read zero), which costs one index range instead of three: the
	// delivered rate of the KPIs.
	DeliveredOnly bool
}

// Buckets returns how many buckets q asks for.
func (q ThroughputQuery) Buckets() int {
	if q.Bucket <= 0 || !q.To.After(q.From) {
		return 0
	}
	span := q.To.Sub(q.From)
	return int((span + q.Bucket - 1) / q.Bucket)
}

// Validate reports what is wrong with q, wrapping ErrInvalid.
func (q ThroughputQuery) Validate() error {
	switch {
	case q.From.IsZero() || q.To.IsZero():
		return fmt.Errorf("throughput: from and to are required: %w", ErrInvalid)
	case !q.To.After(q.From):
		return fmt.Errorf("throughput: to must be after from: %w", ErrInvalid)
	case q.Bucket < time.Second || q.Bucket%time.Second != 0:
		return fmt.Errorf("throughput: the bucket must be a positive whole number of seconds: %w", ErrInvalid)
	case q.Buckets() > MaxThroughputBuckets:
		return fmt.Errorf("throughput: %d buckets asked, at most %d: %w", q.Buckets(), MaxThroughputBuckets, ErrInvalid)
	}
	switch q.By {
	case ThroughputTotal, ThroughputBySite, ThroughputByType:
	default:
		return fmt.Errorf("throughput: unknown grouping %q (site or type): %w", q.By, ErrInvalid)
	}
	return nil
}

// ThroughputCounts are the outcomes counted in one bucket (or a whole
// series).
type ThroughputCounts struct {
	// Delivered counts rows whose DeliveredAt falls in the bucket.
	Delivered int64
	// Failed counts failed attempts that left their row Retrying: the
	// Attempted audit records with Status Retrying whose At falls in the
	// bucket, but for those of Outcome Interrupted (a shutdown).
	Failed int64
	// Parked counts rows parking: the Parked audit records (Status Parked) whose At falls
	// in the bucket (the row may have been retried or discarded since).
	Parked int64
}

// Add adds o to c.
func (c *ThroughputCounts) Add(o ThroughputCounts) {
	c.Delivered += o.Delivered
	c.Failed += o.Failed
	c.Parked += o.Parked
}

// ThroughputSeries is the buckets of one key.
type ThroughputSeries struct {
	// Key is the site or type of the series; "" for ThroughputTotal.
	Key string
	// Buckets holds every bucket of the query, oldest first, zeros
	// included.
	Buckets []ThroughputCounts
	// Total is the sum of Buckets.
	Total ThroughputCounts
}

// Throughput is Store.Throughput's answer.
type Throughput struct {
	From   time.Time
	To     time.Time
	Bucket time.Duration
	// Series, sorted by Key. ThroughputTotal yields exactly one series, with
	// key "", even when nothing happened; a split yields one series per key
	// with at least one count.
	Series []ThroughputSeries
}

// ThroughputKind is an outcome a store counts, in a ThroughputCount.
type ThroughputKind int

// The outcomes a store counts.
const (
	ThroughputDelivered ThroughputKind = iota
	ThroughputFailed
	ThroughputParked
)

// ThroughputCount is one partial count a store adapter read: N events of
// Kind (ThroughputDelivered, ThroughputFailed or ThroughputParked) of Key
// in bucket Bucket (0 is the bucket at From).
type ThroughputCount struct {
	Key    string
	Bucket int
	Kind   ThroughputKind
	N      int64
}

// NewThroughput assembles the answer to q from partial counts, which may
// repeat a (key, bucket, kind) and come in any order. Counts outside q's
// buckets are dropped. Adapters share it so that every one shapes its
// answer the same way.
func NewThroughput(q ThroughputQuery, counts []ThroughputCount) Throughput {
	out := Throughput{From: q.From, To: q.To, Bucket: q.Bucket}
	n := q.Buckets()
	series := map[string]*ThroughputSeries{}
	get := func(key string) *ThroughputSeries {
		s := series[key]
		if s == nil {
			s = &ThroughputSeries{Key: key, Buckets: make([]ThroughputCounts, n)}
			series[key] = s
		}
		return s
	}
	if q.By == ThroughputTotal {
		get("")
	}
	for _, c := range counts {
		if c.Bucket < 0 || c.Bucket >= n || c.N == 0 {
			continue
		}
		key := c.Key
		if q.By == ThroughputTotal {
			key = ""
		}
		var add ThroughputCounts
		switch c.Kind {
		case ThroughputDelivered:
			add.Delivered = c.N
		case ThroughputFailed:
			add.Failed = c.N
		case ThroughputParked:
			add.Parked = c.N
		default:
			continue
		}
		s := get(key)
		s.Buckets[c.Bucket].Add(add)
		s.Total.Add(add)
	}
	out.Series = make([]ThroughputSeries, 0, len(series))
	for _, s := range series {
		out.Series = append(out.Series, *s)
	}
	slices.SortFunc(out.Series, func(a, b ThroughputSeries) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// ThroughputBucket returns the bucket of q that instant t falls in, and
// false when t is outside [q.From, q.To).
func ThroughputBucket(q ThroughputQuery, t time.Time) (int, bool) {
	if t.Before(q.From) || !t.Before(q.To) || q.Bucket <= 0 {
		return 0, false
	}
	return int(t.Sub(q.From) / q.Bucket), true
}
