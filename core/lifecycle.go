package core

import (
	"fmt"

	"github.com/siteline/outbox/ports"
)

// legalMoves is the state machine, drawn in ARCHITECTURE.md.
// Delivered and Discarded have no way out; Parked leaves only by an operator.
var legalMoves = map[ports.Status][]ports.Status{
	ports.StatusPending:  {ports.StatusDelivered, ports.StatusRetrying, ports.StatusParked},
	ports.StatusRetrying: {ports.StatusDelivered, ports.StatusRetrying, ports.StatusParked},
	ports.StatusParked:   {ports.StatusPending, ports.StatusDiscarded},
}

// Move checks that a row may go from one status to another. An illegal move is
// an error wrapping ports.ErrConflict, never a silent no-op.
func Move(from, to ports.Status) error {
	for _, s := range legalMoves[from] {
		if s == to {
			return nil
		}
	}
	return fmt.Errorf("illegal move %s → %s: %w", from, to, ports.ErrConflict)
}
