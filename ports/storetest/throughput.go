package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// fmtSeries prints a series' non-zero buckets as "i:d/f/p".
func fmtSeries(s ports.ThroughputSeries) string {
	out := fmt.Sprintf("%q total %d/%d/%d [", s.Key, s.Total.Delivered, s.Total.Failed, s.Total.Parked)
	for i, b := range s.Buckets {
		if b != (ports.ThroughputCounts{}) {
			out += fmt.Sprintf(" %d:%d/%d/%d", i, b.Delivered, b.Failed, b.Parked)
		}
	}
	return out + " ]"
}

func checkThroughput(t *testing.T, what string, want, got ports.Throughput) {
	t.Helper()
	if !got.From.Equal(want.From) || !got.To.Equal(want.To) || got.Bucket != want.Bucket {
		t.Errorf("%s: window %s..%s by %s, want %s..%s by %s", what, got.From, got.To, got.Bucket, want.From, want.To, want.Bucket)
	}
	if len(got.Series) != len(want.Series) {
		t.Errorf("%s: %d series, want %d", what, len(got.Series), len(want.Series))
	}
	for i := range min(len(got.Series), len(want.Series)) {
		if g, w := fmtSeries(got.Series[i]), fmtSeries(want.Series[i]); g != w || len(got.Series[i].Buckets) != len(want.Series[i].Buckets) {
			t.Errorf("%s: series %d = %s (%d buckets), want %s (%d buckets)", what, i, g, len(got.Series[i].Buckets), w, len(want.Series[i].Buckets))
		}
	}
	for i := len(want.Series); i < len(got.Series); i++ {
		t.Errorf("%s: extra series %s", what, fmtSeries(got.Series[i]))
	}
}

func exerciseThroughput(t *testing.T, newHarness func(t *testing.T) Harness) {
	// The window: six buckets of ten minutes from BaseTime (which carries a
	// microsecond fraction, so a store that rounds its bucket edges fails).
	from := BaseTime
	q := ports.ThroughputQuery{From: from, To: from.Add(time.Hour), Bucket: 10 * time.Minute}
	at := func(d time.Duration) time.Time { return from.Add(d) }
	series := func(key string, buckets map[int]ports.ThroughputCounts) ports.ThroughputSeries {
		s := ports.ThroughputSeries{Key: key, Buckets: make([]ports.ThroughputCounts, 6)}
		for i, c := range buckets {
			s.Buckets[i] = c
			s.Total.Add(c)
		}
		return s
	}
	d := func(n int64) ports.ThroughputCounts { return ports.ThroughputCounts{Delivered: n} }
	f := func(n int64) ports.ThroughputCounts { return ports.ThroughputCounts{Failed: n} }
	p := func(n int64) ports.ThroughputCounts { return ports.ThroughputCounts{Parked: n} }
	sum := func(cs ...ports.ThroughputCounts) ports.ThroughputCounts {
		var out ports.ThroughputCounts
		for _, c := range cs {
			out.Add(c)
		}
		return out
	}

	t.Run("Empty", func(t *testing.T) {
		h := newHarness(t)
		got, err := h.Store.Throughput(t.Context(), q)
		if err != nil {
			t.Fatalf("Throughput: %v", err)
		}
		checkThroughput(t, "total", ports.Throughput{From: q.From, To: q.To, Bucket: q.Bucket,
			Series: []ports.ThroughputSeries{series("", nil)}}, got)
		bySite := q
		bySite.By = ports.ThroughputBySite
		got, err = h.Store.Throughput(t.Context(), bySite)
		if err != nil {
			t.Fatalf("Throughput by site: %v", err)
		}
		if len(got.Series) != 0 {
			t.Errorf("by site on an empty store: %d series, want none", len(got.Series))
		}
	})

	t.Run("BucketsAndSplits", func(t *testing.T) {
		h := newHarness(t)
		ctx := t.Context()
		var ns []ports.Notification
		var records []ports.AuditRecord
		row := func(site, typ string) ports.Notification {
			n := NewNotification(at(-2 * time.Hour))
			n.SourceSite, n.Type = site, typ
			return n
		}
		delivered := func(site, typ string, when time.Duration) {
			n := row(site, typ)
			n.Status, n.DeliveredAt, n.UpdatedAt = ports.StatusDelivered, at(when), at(when)
			ns = append(ns, n)
			records = append(records, ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at(when),
				Kind: ports.AuditDelivered, Actor: ports.ActorSystem, Status: ports.StatusDelivered})
		}
		// failures appends a row's failed attempts (Retrying) at whens; a
		// last Attempted record leaving it Parked is no failure but a
		// parking, recorded at parkAt when it is not negative.
		failures := func(site, typ string, parkAt time.Duration, whens ...time.Duration) {
			n := row(site, typ)
			n.Status, n.RetryCount, n.LastError = ports.StatusRetrying, len(whens), "smtp: 451"
			for _, w := range whens {
				records = append(records, ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at(w), Kind: ports.AuditAttempted,
					Actor: ports.ActorSystem, Outcome: ports.OutcomeTransient, Status: ports.StatusRetrying, Error: "smtp: 451"})
			}
			if parkAt >= 0 {
				n.Status, n.UpdatedAt = ports.StatusParked, at(parkAt)
				records = append(records,
					ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at(parkAt), Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
						Outcome: ports.OutcomePermanent, Status: ports.StatusParked, Error: "smtp: 550"},
					ports.AuditRecord{NotificationID: n.ID, SourceSite: site, Type: typ, At: at(parkAt), Kind: ports.AuditParked, Actor: ports.ActorSystem,
						Status: ports.StatusParked, Error: "smtp: 550"})
			}
			ns = append(ns, n)
		}
		const none = -1
		// Bucket edges: the first instant of a bucket is in it, the one
		// before it in the previous one; From is in, To is out.
		delivered("site-a", "email", 0)                                               // bucket 0, the first instant of the window
		delivered("site-a", "email", -time.Microsecond)                               // before the window
		delivered("site-a", "sms", 10*time.Minute-time.Microsecond)                   // bucket 0, its last instant
		delivered("site-a", "email", 10*time.Minute)                                  // bucket 1, its first instant
		delivered("site-b", "email", 59*time.Minute)                                  // bucket 5
		delivered("site-b", "email", time.Hour)                                       // at To: out
		delivered("site-b", "sms", time.Hour-time.Microsecond)                        // bucket 5, the last instant
		failures("site-a", "email", none, 5*time.Minute, 15*time.Minute, 2*time.Hour) // buckets 0, 1; one after the window
		failures("site-b", "sms", 40*time.Minute, 20*time.Minute, 30*time.Minute)     // buckets 2, 3; parked in 4
		failures("site-b", "email", 50*time.Minute, -time.Minute)                     // a failure before; parked in 5
		// A pending row, an operator's Retried and Discarded records count
		// nowhere; so does a record of a kind that counts whose status does
		// not (an Attempted record that delivered), and an attempt a
		// shutdown cut short (Interrupted, leaving its row Retrying).
		other := row("site-c", "email")
		ns = append(ns, other)
		records = append(records,
			ports.AuditRecord{NotificationID: other.ID, SourceSite: "site-c", Type: "email", At: at(30 * time.Second), Kind: ports.AuditAttempted,
				Actor: ports.ActorSystem, Outcome: ports.OutcomeInterrupted, Status: ports.StatusRetrying, Error: "interrupted: context canceled"},
			ports.AuditRecord{NotificationID: other.ID, At: at(time.Minute), Kind: ports.AuditRetried, Actor: "alice", Status: ports.StatusPending},
			ports.AuditRecord{NotificationID: other.ID, At: at(2 * time.Minute), Kind: ports.AuditDiscarded, Actor: "alice", Status: ports.StatusDiscarded},
			ports.AuditRecord{NotificationID: other.ID, SourceSite: "site-c", Type: "email", At: at(3 * time.Minute), Kind: ports.AuditAttempted,
				Actor: ports.ActorSystem, Outcome: ports.OutcomeSuccess, Status: ports.StatusDelivered})
		mustInsert(t, h.Store, ns...)
		mustAppend(t, h.Audit, records...)

		run := func(q ports.ThroughputQuery) ports.Throughput {
			t.Helper()
			got, err := h.Store.Throughput(ctx, q)
			if err != nil {
				t.Fatalf("Throughput(%+v): %v", q, err)
			}
			return got
		}
		want := func(ss ...ports.ThroughputSeries) ports.Throughput {
			return ports.Throughput{From: q.From, To: q.To, Bucket: q.Bucket, Series: ss}
		}

		checkThroughput(t, "total", want(series("", map[int]ports.ThroughputCounts{
			0: sum(d(2), f(1)), 1: sum(d(1), f(1)), 2: f(1), 3: f(1), 4: p(1), 5: sum(d(2), p(1)),
		})), run(q))

		bySite := q
		bySite.By = ports.ThroughputBySite
		checkThroughput(t, "by site", want(
			series("site-a", map[int]ports.ThroughputCounts{0: sum(d(2), f(1)), 1: sum(d(1), f(1))}),
			series("site-b", map[int]ports.ThroughputCounts{2: f(1), 3: f(1), 4: p(1), 5: sum(d(2), p(1))}),
		), run(bySite))

		byType := q
		byType.By = ports.ThroughputByType
		checkThroughput(t, "by type", want(
			series("email", map[int]ports.ThroughputCounts{0: sum(d(1), f(1)), 1: sum(d(1), f(1)), 5: sum(d(1), p(1))}),
			series("sms", map[int]ports.ThroughputCounts{0: d(1), 2: f(1), 3: f(1), 4: p(1), 5: d(1)}),
		), run(byType))

		oneSite := q
		oneSite.Site, oneSite.By = "site-b", ports.ThroughputByType
		checkThroughput(t, "site-b by type", want(
			series("email", map[int]ports.ThroughputCounts{5: sum(d(1), p(1))}),
			series("sms", map[int]ports.ThroughputCounts{2: f(1), 3: f(1), 4: p(1), 5: d(1)}),
		), run(oneSite))

		oneType := q
		oneType.Type = "sms"
		checkThroughput(t, "sms", want(series("", map[int]ports.ThroughputCounts{
			0: d(1), 2: f(1), 3: f(1), 4: p(1), 5: d(1),
		})), run(oneType))

		// DeliveredOnly counts the delivered rows alone (the rate).
		deliveredOnly := bySite
		deliveredOnly.DeliveredOnly = true
		checkThroughput(t, "delivered only, by site", want(
			series("site-a", map[int]ports.ThroughputCounts{0: d(2), 1: d(1)}),
			series("site-b", map[int]ports.ThroughputCounts{5: d(2)}),
		), run(deliveredOnly))

		// A window that is not a whole number of buckets: the last bucket
		// is cut at To. Buckets of 25 minutes: [0,25) [25,50) [50,60).
		ragged := ports.ThroughputQuery{From: q.From, To: q.To, Bucket: 25 * time.Minute}
		got := run(ragged)
		if len(got.Series) != 1 || len(got.Series[0].Buckets) != 3 {
			t.Fatalf("ragged: %+v, want one series of 3 buckets", got.Series)
		}
		wantRagged := []ports.ThroughputCounts{sum(d(3), f(2), f(1)), sum(f(1), p(1)), sum(d(2), p(1))}
		for i, w := range wantRagged {
			if got.Series[0].Buckets[i] != w {
				t.Errorf("ragged bucket %d = %+v, want %+v", i, got.Series[0].Buckets[i], w)
			}
		}

		// Records are counted under their own site and type: a record
		// whose row is gone still counts, until the log forgets it (as the
		// purge does after deleting rows).
		purged := mustPurge(t, h.Store, at(time.Hour+time.Minute), 100)
		if len(purged) != 9 {
			t.Fatalf("purged %d rows, want the 7 delivered and 2 parked", len(purged))
		}
		got = run(q)
		if tot := got.Series[0].Total; tot != (ports.ThroughputCounts{Failed: 4, Parked: 2}) {
			t.Errorf("after the purge: %s, want the failures and parkings of the records only", fmtSeries(got.Series[0]))
		}
		if err := h.Audit.Forget(ctx, purged); err != nil {
			t.Fatal(err)
		}
		got = run(q)
		if tot := got.Series[0].Total; tot != (ports.ThroughputCounts{Failed: 2}) {
			t.Errorf("after the log forgot the purged rows: %s, want site-a's 2 failures", fmtSeries(got.Series[0]))
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		s := newHarness(t).Store
		for _, bad := range []ports.ThroughputQuery{
			{},
			{From: q.From, To: q.From, Bucket: time.Minute},
			{From: q.To, To: q.From, Bucket: time.Minute},
			{From: q.From, To: q.To},
			{From: q.From, To: q.To, Bucket: 1500 * time.Millisecond},
			{From: q.From, To: q.From.Add(1001 * time.Second), Bucket: time.Second},
			{From: q.From, To: q.To, Bucket: time.Minute, By: "list"},
		} {
			if _, err := s.Throughput(t.Context(), bad); !errors.Is(err, ports.ErrInvalid) {
				t.Errorf("Throughput(%+v) = %v, want ErrInvalid", bad, err)
			}
		}
	})
}
