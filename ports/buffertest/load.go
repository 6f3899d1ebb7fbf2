package buffertest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// MaxBody is the largest body a notification may carry (64 KiB).
const MaxBody = 64 << 10

func exerciseLoad(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("LargeBodies", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 6)
		for i := range ns {
			ns[i].Body = largeBody(i)
			ns[i].Subject = strings.Repeat("s", 255)
		}
		mustAppend(t, b, ns[:4]...)
		mustAppend(t, b, ns[4])
		mustAppend(t, b, ns[5])
		requireContents(t, b, ns)
		mustRemove(t, b, ns[0].ID, ns[4].ID)
		requireContents(t, b, []ports.Submission{ns[1], ns[2], ns[3], ns[5]})
	})

	t.Run("ManyItems", func(t *testing.T) {
		b := open(t)
		const n, batch = 10_000, 500
		ns := NewSubmissions(BaseTime, n)
		for i := 0; i < n; i += batch {
			mustAppend(t, b, ns[i:i+batch]...)
		}
		requireCount(t, b, n)
		all := requireContents(t, b, ns)
		if got := scanAll(t, b, 333); len(got) != n {
			t.Fatalf("scanning in pages of 333 found %d notifications, want %d", len(got), n)
		}

		// Remove every other one, in batches, and check the rest.
		var gone []string
		var kept []ports.Submission
		for i, s := range ns {
			if i%2 == 0 {
				gone = append(gone, s.ID)
			} else {
				kept = append(kept, s)
			}
		}
		for i := 0; i < len(gone); i += batch {
			mustRemove(t, b, gone[i:min(i+batch, len(gone))]...)
		}
		st := requireCount(t, b, int64(len(kept)))
		if !sameTime(st.OldestEnqueuedAt, ns[1].SiteEnqueuedAt) {
			t.Fatalf("Stats.OldestEnqueuedAt = %s, want %s", fmtTime(st.OldestEnqueuedAt), fmtTime(ns[1].SiteEnqueuedAt))
		}
		rest := requireContents(t, b, kept)
		if rest[0].Seq != all[1].Seq || rest[len(rest)-1].Seq != all[n-1].Seq {
			t.Fatalf("Seqs changed by a Remove: first %d→%d, last %d→%d",
				all[1].Seq, rest[0].Seq, all[n-1].Seq, rest[len(rest)-1].Seq)
		}
	})

	t.Run("ConcurrentAppends", func(t *testing.T) {
		b := open(t)
		const callers, own, batch = 16, 40, 4
		shared := NewSubmissions(BaseTime.Add(-time.Hour), 8)
		mine := make([][]ports.Submission, callers)
		for c := range mine {
			mine[c] = NewSubmissions(BaseTime.Add(time.Duration(c)*time.Minute), own)
		}

		start := make(chan struct{})
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				<-start
				for i := 0; i < own; i += batch {
					if i == own/2 {
						if err := b.Append(t.Context(), shared); err != nil {
							t.Errorf("caller %d: Append of the shared batch: %v", c, err)
							return
						}
					}
					if err := b.Append(t.Context(), mine[c][i:i+batch]); err != nil {
						t.Errorf("caller %d: Append: %v", c, err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}

		all := scanAll(t, b, 1000)
		seq := make(map[string]uint64, len(all))
		for _, it := range all {
			if _, dup := seq[it.ID]; dup {
				t.Fatalf("id %s is buffered twice", it.ID)
			}
			seq[it.ID] = it.Seq
		}
		want := callers*own + len(shared)
		if len(all) != want {
			t.Fatalf("buffer holds %d notifications after concurrent appends, want %d", len(all), want)
		}
		requireCount(t, b, int64(want))
		for c := range mine {
			var prev uint64
			for i, s := range mine[c] {
				got, ok := seq[s.ID]
				if !ok {
					t.Fatalf("caller %d: notification %d (%s) is missing", c, i, s.ID)
				}
				if got <= prev {
					t.Fatalf("caller %d: notification %d has Seq %d, not above the caller's previous one (%d)",
						c, i, got, prev)
				}
				prev = got
			}
		}
		for _, s := range shared {
			if _, ok := seq[s.ID]; !ok {
				t.Fatalf("shared notification %s is missing", s.ID)
			}
		}
	})
}

// largeBody returns a body of exactly MaxBody bytes of valid UTF-8 with
// multi-byte characters, different for each i.
func largeBody(i int) string {
	var sb strings.Builder
	sb.Grow(MaxBody)
	head := fmt.Sprintf("body %d: ", i)
	sb.WriteString(head)
	unit := "ünïcödé ✓ line\n"
	for sb.Len()+len(unit) <= MaxBody {
		sb.WriteString(unit)
	}
	sb.WriteString(strings.Repeat("x", MaxBody-sb.Len()))
	return sb.String()
}
