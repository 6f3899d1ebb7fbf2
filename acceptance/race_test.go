//go:build race

package acceptance

// raceEnabled reports that the tests run with the race detector, so the
// site tests build the outbox binary with it too.
const raceEnabled = true
