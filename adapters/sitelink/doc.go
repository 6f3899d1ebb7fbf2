// Package sitelink is the link between the sites and central: a gRPC service
// with four calls, Submit(batch), Status(ids), ReportOperations(rows) and
// Sync(health), that central serves
// ([Server], over a [ports.Central], in practice core.Service) and that a
// site's forwarder calls through [Client], which implements [ports.Central]
// itself, so the forwarder cannot tell central in process from central over
// the network. The protobuf messages stay in internal/pb; convert.go is the
// only place where they meet the Go types.
//
// # Authentication, before anything is read
//
// Every call is authenticated on its headers, in a grpc.InTapHandle, before
// its message is read or decoded; a unary interceptor checks the identity
// again (a second lock) before any handler runs. A refused call stores
// nothing and costs the server no message buffer. A site proves who it is in
// one of two ways, or both:
//
//   - a TLS client certificate, verified against ServerConfig.TLS.ClientCAs,
//     whose Subject CommonName is the id of a known site;
//   - the metadata "authorization: Bearer <token>" carrying a known site's
//     token. The server keeps only SHA-256 digests of the tokens and compares
//     them with subtle.ConstantTimeCompare.
//
// When both are present they must name the same site. A caller with neither,
// with an unknown token, or with a certificate naming no known site is refused
// with codes.Unauthenticated. Refusals go through a guard.Refusals (entrance
// "site_link"): each is counted in outbox_refusals_total{reason}, and at most
// one line per caller address (or site) per minute is logged, with the
// number of refusals it stands for, never a token. The authenticated site id
// becomes [ports.SubmitRequest.Site], [ports.StatusRequest.Site],
// [ports.OpReport.Site], [ports.SyncRequest.Site] and the Sync's
// Health.Site, so central rejects every row whose SourceSite is another
// site's, answers a site's Status for its own notifications only, and files
// reports and health under the caller. The Site a client puts in its request
// is never sent.
//
// # Telemetry and the long poll
//
// ReportOperations carries a site's tracking rows, never their payload, and
// the place of a change-feed page. A report of more than
// [ports.MaxSiteCallReport] rows is refused with InvalidArgument before the
// Central is called. Sync is a long poll: the wait a node asks for is capped
// at [ports.MaxSyncWait] and ends syncAnswerMargin (2 s) before the call's
// timeout (Limits.CallTimeout) and the caller's deadline, so the poll
// answers before either ends it. A site's Syncs in progress count among its
// calls (Limits.MaxCallsPerSite) and at most Limits.MaxSyncsPerSite of them
// run at once, so that a site's long polls never take the slots of its
// Submits; the one past the bound is refused on its headers with
// ResourceExhausted and a retry delay. Stop ends the Syncs still waiting at
// once with Unavailable, and the client sends a Sync cut by a central's
// stop or death again to the next central.
//
// Without TLS (ServerConfig.TLS nil) the link runs in plaintext, for loopback
// and development only; the server logs a warning, and the client refuses to
// send a token in clear to any address but a loopback one.
//
// # Bounds
//
// What one caller can make central spend is bounded before it knows who
// calls: connections per client address and in all (closed at once past the
// bound), the TLS handshake and HTTP/2 preface time, idle connections,
// keepalive pings, streams per connection and the size of one message
// (Limits.GRPC, Limits.Conns; DefaultMaxRecvMsgBytes fits the forwarder's
// largest batch). Once the site is known: its calls in progress
// (Limits.MaxCallsPerSite, of which Limits.MaxSyncsPerSite long polls), the
// time of each call (Limits.CallTimeout) and its ingest quota (Limits.Quota: rows and bytes per second,
// token buckets). A site over either is refused with ResourceExhausted and a
// google.rpc.RetryInfo delay, on the headers when its bucket is already
// empty, otherwise after decoding and before the Central is called: nothing
// of a refused batch is stored.
//
// # Errors
//
// The server maps the port's errors to gRPC codes once, at the edge:
// ports.ErrInvalid → InvalidArgument (a batch over the size limit, with the
// core's text), ports.ErrUnauthenticated → Unauthenticated, a
// *ports.RetryLaterError → ResourceExhausted with its delay, anything else
// (the store is down, say) → Unavailable with a generic text: the real error
// is logged at central and never crosses the link. The client maps the codes
// back: InvalidArgument → ports.ErrInvalid; ResourceExhausted with a retry
// delay → *ports.RetryLaterError (it wraps ErrUnavailable: the forwarder
// keeps the batch and sends it again after the delay); ResourceExhausted
// without one (a message over central's size limit, which no retry can fix)
// → ports.ErrInvalid; Unauthenticated and PermissionDenied →
// ports.ErrUnauthenticated; everything else (Unavailable, DeadlineExceeded,
// a transport or TLS failure) → ports.ErrUnavailable. Each is wrapped with
// the address of the central the call reached, or every configured address
// when it reached none, and the call ("central 127.0.0.1:7443: submit 100
// notifications: unavailable: ..."). Rows rejected one by one are not
// errors: they come back in [ports.SubmitResult.Rejected].
//
// # Several centrals
//
// Any number of central nodes may share one database, and a site may name
// several of them ([ClientConfig.Addrs]), or one host name with several
// addresses ([ClientConfig.Addr], resolved through DNS). The client keeps
// one connection, to the first address in order that it can reach (grpc's
// pick_first), and sends every call there. When that connection fails — the
// central closed it or died, or keepalive pings went unanswered — the next
// call connects again from the first address and goes to the first central
// that answers: a refused connection moves on at once, one that does not
// answer after 250 ms (Happy Eyeballs). Every call is safe to repeat
// (ingest is insert-if-not-exists on the id, a report keeps the newest
// version of each row, a Sync records the health again and commands come
// again until answered), so a call cut by a
// failure is sent again, by the forwarder, to whichever central answers. With
// TLS each central's certificate is verified against the host of its own
// address (or tls.Config.ServerName, when set, for all); a token in clear
// goes to loopback addresses only, each address checked.
package sitelink
