package pb

import (
	"google.golang.org/grpc/metadata"
)

// LeaderKey is the trailer in which a node that does not lead names the
// site API address of the leader it knows, on every call it passes to the
// leader (or would, had it known one), answered or refused. The notify
// client reads it with LeaderHint and calls that node next, when it is one
// of the nodes it was given.
const LeaderKey = "x-outbox-leader"

// maxLeaderHintBytes bounds a leader hint: a host:port.
const maxLeaderHintBytes = 256

// LeaderHint returns the leader address a call's trailer names, and false
// when it names none or something no node would send (several values, an
// empty or oversized one, bytes that are not printable ASCII).
func LeaderHint(md metadata.MD) (string, bool) {
	vals := md.Get(LeaderKey)
	if len(vals) != 1 {
		return "", false
	}
	v := vals[0]
	if v == "" || len(v) > maxLeaderHintBytes {
		return "", false
	}
	for i := range len(v) {
		if v[i] <= 0x20 || v[i] > 0x7e {
			return "", false
		}
	}
	return v, true
}
