// Package siteapi is the site API of one site node: the gRPC service
// outbox.site.v1.Site — Send, Status and Health in front of ports.Site, and
// the cached operations (CachedCall, CachedWrite, Tracking, ListOperations,
// RetryOperation, DiscardOperation) in front of ports.Operations — and (in
// notify) the client scripts use.
//
// A caller is authenticated in grpc's tap handle, on its headers, before any
// message is read: by the script token, or by a client certificate one of
// ClientCAs verifies (known then by its CN), or as a node of the group — a
// certificate one of MemberCAs (the Raft CA) verifies and which names a
// member (CN or DNS name). Every caller is limited by its own token bucket:
// a node by "node:ID", a certificate by "cert:CN", any other caller by
// "ip:ADDR" (an IPv6 address by its /64).
//
// Any node takes every call. A follower passes the calls that change the
// site or need the leader — Send, Status, CachedCall, CachedWrite,
// RetryOperation, DiscardOperation — to the leader's API address, marked
// as forwarded and naming the original caller, with the script token when
// the site has one. The leader believes the mark and the caller only from a
// member. The trust goes both ways: a follower
// offers the TLS application protocol "outbox-member", to which the leader
// answers with its member certificate instead of its API certificate, and
// passes the call on only when that certificate is a member's (one of
// MemberCAs verifies it, as a server's, and it names a member). So a server
// that is not a member never receives a forwarded call or the token, even
// at an address the follower took for the leader's. Without TLS, calls are
// passed on only to a leader address on loopback.
//
// A follower never attempts a cached call or write itself: the core
// attempts before it commits the outcome, so an attempt off the leader
// would reach the target and then fail to commit. Tracking and
// ListOperations are answered by the node called, from its own replicated
// copy of the tracking table, so the site answers them with its leader out
// of reach (a row committed a moment ago may reach a follower's copy a
// moment later). CachedCall and CachedWrite need a deadline, as Send does;
// RetryOperation and DiscardOperation get 30 s without one. A server
// without ServerConfig.Ops answers all six Unimplemented. Errors map as
// ports' sentinels: ErrInvalid to InvalidArgument (with the reason),
// ErrNotFound to NotFound, ErrConflict to FailedPrecondition,
// ErrUnavailable to Unavailable.
package siteapi
