// Package acceptance drives central's driving port (ports.Outbox, through
// core.Service) against the real stores — SQLite and PostgreSQL — with an
// in-process scripted channel, and holds the benchmarks behind the product's
// figures.
//
// PostgreSQL tests run when OUTBOX_TEST_POSTGRES_DSN is set (.ci/test.sh
// starts a throwaway server and sets it); without it they skip and say so.
package acceptance
