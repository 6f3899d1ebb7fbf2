// Package siteapi is the site API of one site node: the gRPC service
// outbox.site.v1.Site (Send, Status, Health) in front of ports.Site, and
// (in notify) the client scripts use.
//
// A caller is authenticated in grpc's tap handle, on its headers, before any
// message is read: by the script token, or by a client certificate one of
// ClientCAs verifies (known then by its CN), or as a node of the group — a
// certificate one of MemberCAs (the Raft CA) verifies and which names a
// member (CN or DNS name). Every caller is limited by its own token bucket:
// a node by "node:ID", a certificate by "cert:CN", any other caller by
// "ip:ADDR" (an IPv6 address by its /64).
//
// Any node takes Sends and Status calls; a follower passes them to the
// leader's API address, marked as forwarded and naming the original caller,
// with the script token when the site has one. The leader believes the mark
// and the caller only from a member. The trust goes both ways: a follower
// offers the TLS application protocol "outbox-member", to which the leader
// answers with its member certificate instead of its API certificate, and
// passes the call on only when that certificate is a member's (one of
// MemberCAs verifies it, as a server's, and it names a member). So a server
// that is not a member never receives a forwarded call or the token, even
// at an address the follower took for the leader's. Without TLS, calls are
// passed on only to a leader address on loopback.
package siteapi
