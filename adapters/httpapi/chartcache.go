package httpapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// chartCacheTTL is how long the counts of closed buckets are kept: those
// counts do not change, but for a purge, which this bounds how long the
// charts may still show.
const chartCacheTTL = 5 * time.Minute

// chartCacheSize bounds the windows kept (each a selection of the page:
// site, type, split, days); beyond it the expired ones go, then all.
const chartCacheSize = 32

// chartCache keeps the counts of the closed buckets of the dashboard's
// daily charts, so that each refresh of each viewer reads the bucket in
// progress alone: a week of hours per site costs a store 100 to 500 ms.
// Its zero value is ready; it is safe for concurrent use.
type chartCache struct {
	mu      sync.Mutex
	entries map[string]chartCacheEntry
}

type chartCacheEntry struct {
	t       ports.Throughput
	expires time.Time
}

// cacheKey names a query's window and selection.
func cacheKey(q ports.ThroughputQuery) string {
	return fmt.Sprintf("%d %d %d %q %q %q %t", q.From.UnixMicro(), q.To.UnixMicro(), q.Bucket, q.Site, q.Type, q.By, q.DeliveredOnly)
}

// throughput answers q, a window of whole buckets whose last one may be
// in progress at now: the closed buckets from the cache (read from o and
// kept when missing), the last one from o.
func (c *chartCache) throughput(ctx context.Context, o ports.Outbox, q ports.ThroughputQuery, now time.Time) (ports.Throughput, error) {
	closed := q
	closed.To = q.To.Add(-q.Bucket)
	if !closed.To.After(closed.From) {
		return o.Throughput(ctx, q)
	}
	open := q
	open.From = closed.To
	key := cacheKey(closed)
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		t, err := o.Throughput(ctx, closed)
		if err != nil {
			return ports.Throughput{}, err
		}
		e = chartCacheEntry{t: t, expires: now.Add(chartCacheTTL)}
		c.put(key, e, now)
	}
	last, err := o.Throughput(ctx, open)
	if err != nil {
		return ports.Throughput{}, err
	}
	return joinThroughput(q, e.t, last), nil
}

func (c *chartCache) put(key string, e chartCacheEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]chartCacheEntry{}
	}
	if len(c.entries) >= chartCacheSize {
		for k, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= chartCacheSize {
			clear(c.entries)
		}
	}
	c.entries[key] = e
}

// joinThroughput is the answer to q from the answers to its buckets but
// the last (closed) and to its last (last), series by series.
func joinThroughput(q ports.ThroughputQuery, closed, last ports.Throughput) ports.Throughput {
	n := q.Buckets()
	out := ports.Throughput{From: q.From, To: q.To, Bucket: q.Bucket}
	byKey := map[string]*ports.ThroughputSeries{}
	get := func(key string) *ports.ThroughputSeries {
		s := byKey[key]
		if s == nil {
			s = &ports.ThroughputSeries{Key: key, Buckets: make([]ports.ThroughputCounts, n)}
			byKey[key] = s
		}
		return s
	}
	for _, s := range closed.Series {
		j := get(s.Key)
		copy(j.Buckets, s.Buckets)
		j.Total.Add(s.Total)
	}
	for _, s := range last.Series {
		j := get(s.Key)
		for i, b := range s.Buckets {
			j.Buckets[n-len(s.Buckets)+i].Add(b)
		}
		j.Total.Add(s.Total)
	}
	for _, s := range byKey {
		out.Series = append(out.Series, *s)
	}
	slices.SortFunc(out.Series, func(a, b ports.ThroughputSeries) int { return strings.Compare(a.Key, b.Key) })
	return out
}
