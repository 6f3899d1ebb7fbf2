// Package core is the domain of central: the notification lifecycle, the
// retry policy, ingest, the dispatcher, expiry, operator actions, queries,
// KPIs, audit and purge. It talks to the world only through the ports
// package, and imports nothing but the standard library, ports and small
// pure helpers.
package core
