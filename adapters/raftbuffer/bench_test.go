package raftbuffer

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/opstoretest"
)

// BenchmarkAppend measures Sends as the site makes them (one notification
// per Append) on a three-voter group on loopback: one caller, then 64
// concurrent callers (goal: ≥ 10,000/s with 64 callers, one caller's p50
// ≤ 2 ms).
func BenchmarkAppend(b *testing.B) {
	c := newCluster(b, 3)
	l := c.leader()
	ctx := context.Background()

	b.Run("callers=1", func(b *testing.B) {
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			n := []ports.Submission{buffertest.NewSubmission(buffertest.BaseTime)}
			start := time.Now()
			if err := l.Append(ctx, n); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	})

	b.Run("callers=64", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := []ports.Submission{buffertest.NewSubmission(buffertest.BaseTime)}
				if err := l.Append(ctx, n); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	})
}

// BenchmarkPutOps measures the commit of a buffered cached call as the
// site makes it (one Pending row with its params per Put) on a three-voter
// group on loopback: one caller, then 64 concurrent callers.
func BenchmarkPutOps(b *testing.B) {
	c := newCluster(b, 3)
	l := c.leader()
	ctx := context.Background()
	put := func() error {
		op := opstoretest.NewCall(opstoretest.BaseTime)
		applied, err := l.Put(ctx, []ports.OpChange{opstoretest.Insert(op)})
		if err == nil && !applied[0] {
			err = fmt.Errorf("insert of %s did not apply", op.ID)
		}
		return err
	}

	b.Run("callers=1", func(b *testing.B) {
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			start := time.Now()
			if err := put(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	})

	b.Run("callers=64", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := put(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
	})
}
