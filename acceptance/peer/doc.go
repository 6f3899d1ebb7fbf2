// Package peer holds benchmarks of a peer, River (a Go + PostgreSQL job
// queue), that the outbox's own ingest and dispatch benchmarks are compared
// with: its batch insert (BenchmarkPeerInsert) and its burn-down of a
// backlog by a tuned client with a no-op worker (BenchmarkPeerBurnDown).
//
// It is a module of its own so that River never enters the outbox's
// dependencies; `go test ./...` at the repository's root does not reach it.
// compare.sh runs these and the outbox's benchmarks alternately; README.md
// says how.
package peer
