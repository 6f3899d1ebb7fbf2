package membuffer_test

import (
	"errors"
	"testing"

	"github.com/siteline/outbox/adapters/membuffer"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
	"github.com/siteline/outbox/ports/opstoretest"
)

func TestContract(t *testing.T) {
	buffertest.Exercise(t, func(t *testing.T) ports.Buffer { return membuffer.New("node-1") })
}

func TestUnavailableRefusesWrites(t *testing.T) {
	b := membuffer.New("node-1")
	kept := buffertest.NewSubmissions(buffertest.BaseTime, 2)
	if err := b.Append(t.Context(), kept); err != nil {
		t.Fatalf("Append: %v", err)
	}

	b.SetAvailable(false)
	err := b.Append(t.Context(), buffertest.NewSubmissions(buffertest.BaseTime, 1))
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Append while unavailable: err = %v, want one wrapping ErrUnavailable", err)
	}
	err = b.Remove(t.Context(), []string{kept[0].ID})
	if !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Remove while unavailable: err = %v, want one wrapping ErrUnavailable", err)
	}
	st, err := b.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats while unavailable: %v", err)
	}
	if st.Count != 2 {
		t.Fatalf("Count = %d after refused writes, want 2", st.Count)
	}

	b.SetAvailable(true)
	if err := b.Remove(t.Context(), []string{kept[0].ID}); err != nil {
		t.Fatalf("Remove once available again: %v", err)
	}
	got, err := b.Contains(t.Context(), []string{kept[0].ID, kept[1].ID})
	if err != nil {
		t.Fatalf("Contains: %v", err)
	}
	if len(got) != 1 || !got[kept[1].ID] {
		t.Fatalf("Contains = %v, want only %s", got, kept[1].ID)
	}
}

func TestReturnedCopiesAreOwnedByCaller(t *testing.T) {
	b := membuffer.New("node-1")
	n := buffertest.NewSubmission(buffertest.BaseTime)
	want := string(n.TypeData)
	if err := b.Append(t.Context(), []ports.Submission{n}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	n.TypeData[0] = 'X' // the caller reuses its slice
	got, err := b.Scan(t.Context(), 0, 1)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if string(got[0].TypeData) != want {
		t.Fatalf("TypeData changed with the caller's slice: %s", got[0].TypeData)
	}
	got[0].TypeData[0] = 'Y'
	again, err := b.Scan(t.Context(), 0, 1)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if string(again[0].TypeData) != want {
		t.Fatalf("TypeData changed with a returned slice: %s", again[0].TypeData)
	}
}

func TestScanLimitBelowOneIsInvalid(t *testing.T) {
	b := membuffer.New("node-1")
	if _, err := b.Scan(t.Context(), 0, 0); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Scan with limit 0: err = %v, want one wrapping ErrInvalid", err)
	}
}

func TestOpStoreContract(t *testing.T) {
	opstoretest.Exercise(t, opstoretest.Harness{
		Open: func(t *testing.T) ports.OpStore { return membuffer.NewOps() },
		Refusing: func(t *testing.T, s ports.OpStore) ports.OpStore {
			s.(*membuffer.Ops).SetAvailable(false)
			return s
		},
	})
}
