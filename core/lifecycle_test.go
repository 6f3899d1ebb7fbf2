package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/siteline/outbox/ports"
)

func TestMoveAllowsExactlyTheLegalMoves(t *testing.T) {
	legal := map[string]bool{
		"Pending→Delivered": true, "Pending→Retrying": true, "Pending→Parked": true,
		"Retrying→Delivered": true, "Retrying→Retrying": true, "Retrying→Parked": true,
		"Parked→Pending": true, "Parked→Discarded": true,
	}
	all := append([]ports.Status{ports.StatusForwarding}, ports.CentralStatuses...)
	for _, from := range all {
		for _, to := range all {
			name := fmt.Sprintf("%s→%s", from, to)
			err := Move(from, to)
			if legal[name] {
				if err != nil {
					t.Errorf("%s: want legal, got %v", name, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s: want an error, got nil", name)
			} else if !errors.Is(err, ports.ErrConflict) {
				t.Errorf("%s: error %v does not wrap ErrConflict", name, err)
			}
		}
	}
}
