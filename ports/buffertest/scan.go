package buffertest

import (
	"testing"

	"github.com/siteline/outbox/ports"
)

func exerciseScan(t *testing.T, open func(t *testing.T) ports.Buffer) {
	t.Run("Pages", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 25)
		for i := 0; i < len(ns); i += 7 {
			mustAppend(t, b, ns[i:min(i+7, len(ns))]...)
		}
		all := requireContents(t, b, ns)

		var after uint64
		var pages [][]ports.Buffered
		for {
			got, err := b.Scan(t.Context(), after, 10)
			if err != nil {
				t.Fatalf("Scan(after %d, 10): %v", after, err)
			}
			if len(got) == 0 {
				break
			}
			pages = append(pages, got)
			after = got[len(got)-1].Seq
		}
		if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 {
			sizes := make([]int, len(pages))
			for i, p := range pages {
				sizes[i] = len(p)
			}
			t.Fatalf("pages of 10 over 25 items have sizes %v, want [10 10 5]", sizes)
		}
		for i, p := range pages {
			for j, it := range p {
				if want := all[i*10+j]; it.Seq != want.Seq || it.ID != want.ID {
					t.Fatalf("page %d item %d is %s (Seq %d), want %s (Seq %d)", i, j, it.ID, it.Seq, want.ID, want.Seq)
				}
			}
		}

		// after in the middle: everything strictly above it.
		got, err := b.Scan(t.Context(), all[11].Seq, 3)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if len(got) != 3 || got[0].ID != all[12].ID || got[2].ID != all[14].ID {
			t.Fatalf("Scan(after the 12th, 3) = %s, want the 13th to the 15th", ids(got))
		}
		// after the last: nothing.
		got, err = b.Scan(t.Context(), all[24].Seq, 10)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if len(got) != 0 {
			t.Fatalf("Scan(after the last Seq) = %s, want nothing", ids(got))
		}
	})

	t.Run("AfterARemovedSeq", func(t *testing.T) {
		b := open(t)
		ns := NewSubmissions(BaseTime, 6)
		mustAppend(t, b, ns...)
		all := requireContents(t, b, ns)
		mustRemove(t, b, ns[2].ID, ns[3].ID)
		got, err := b.Scan(t.Context(), all[2].Seq, 10)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if len(got) != 2 || got[0].ID != ns[4].ID || got[1].ID != ns[5].ID {
			t.Fatalf("Scan(after a removed Seq) = %s, want %s and %s", ids(got), ns[4].ID, ns[5].ID)
		}
	})

	t.Run("Empty", func(t *testing.T) {
		b := open(t)
		got, err := b.Scan(t.Context(), 0, 10)
		if err != nil {
			t.Fatalf("Scan of an empty buffer: %v", err)
		}
		if len(got) != 0 {
			t.Fatalf("Scan of an empty buffer = %s", ids(got))
		}
	})
}
