//go:build !race

package main

// raceEnabled reports that the tests run with the race detector, so the
// end-to-end tests build the binary with it too.
const raceEnabled = false
