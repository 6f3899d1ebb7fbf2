// Package ports holds the contracts between the domain core and the world
// around it: the driving port central offers ([Outbox]) and the driven ports the
// core needs ([Store], [AuditLog], [Channel], [Directory], [Clock], and the
// optional [DeliveryObserver]).
//
// Every type here is plain Go. No SQL, gRPC, protobuf or driver type crosses a
// port. Each driven port has one exported contract suite (for example
// ports/storetest) that every adapter runs against its real backend.
//
// All times are UTC. A zero [time.Time] means "unset" and is stored as NULL.
// Stores keep at least microsecond precision.
package ports
