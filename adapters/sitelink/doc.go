// Package sitelink is the link between the sites and central (PRODUCT P1–P3):
// a gRPC service with two calls, Submit(batch) and Status(ids), that central
// serves ([Server], over a [ports.Central], in practice core.Service) and that
// a site's forwarder calls through [Client], which implements [ports.Central]
// itself, so the forwarder cannot tell central in process from central over
// the network. The protobuf messages stay in internal/pb; convert.go is the
// only place where they meet the Go types.
//
// # Authentication
//
// Every call is authenticated, in a unary interceptor, before any handler
// runs; a refused call stores nothing. A site proves who it is in one of two
// ways, or both:
//
//   - a TLS client certificate, verified against ServerConfig.TLS.ClientCAs,
//     whose Subject CommonName is the id of a known site;
//   - the metadata "authorization: Bearer <token>" carrying a known site's
//     token. The server keeps only SHA-256 digests of the tokens and compares
//     them with subtle.ConstantTimeCompare.
//
// When both are present they must name the same site. A caller with neither,
// with an unknown token, or with a certificate naming no known site is refused
// with codes.Unauthenticated, and the server logs one line saying why, with
// the peer address and the certificate's CN, never a token. The authenticated
// site id becomes [ports.SubmitRequest.Site], so central rejects every row
// whose SourceSite is another site's: a site can submit only its own rows.
// The Site a client puts in its request is never sent.
//
// Without TLS (ServerConfig.TLS nil) the link runs in plaintext, for loopback
// and development only; the server logs a warning, and the client refuses to
// send a token in clear to any address but a loopback one.
//
// # Errors
//
// The server maps the port's errors to gRPC codes once, at the edge:
// ports.ErrInvalid → InvalidArgument (a batch over the size limit, with the
// core's text), ports.ErrUnauthenticated → Unauthenticated, anything else
// (the store is down, say) → Unavailable with a generic text: the real error
// is logged at central and never crosses the link. The client maps the codes
// back: InvalidArgument and ResourceExhausted (a message over central's
// MaxRecvMsgBytes, which no retry can fix) → ports.ErrInvalid, Unauthenticated
// and PermissionDenied → ports.ErrUnauthenticated, everything else (Unavailable,
// DeadlineExceeded, a transport or TLS failure) → ports.ErrUnavailable; each
// is wrapped with the address and the call ("central 127.0.0.1:7443: submit
// 100 notifications: unavailable: ..."). Rows rejected one by one are not
// errors: they come back in [ports.SubmitResult.Rejected].
package sitelink
