package guard

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/siteline/outbox/ports"
)

// GRPCLimits bounds what one gRPC server spends on its callers. Zero fields
// take the defaults below.
type GRPCLimits struct {
	// MaxRecvMsgBytes bounds one request message; a larger one is refused
	// before it is decoded (default 4 MiB).
	MaxRecvMsgBytes int
	// MaxConcurrentStreams bounds the calls one connection runs at once
	// (default 32).
	MaxConcurrentStreams uint32
	// HandshakeTimeout bounds the TLS handshake and the HTTP/2 preface of a
	// new connection (default 10 s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has had no call for this long
	// (default 5 min); clients reconnect on their next call.
	IdleTimeout time.Duration
	// PingInterval is how often the server pings a connection without
	// traffic to find dead peers, and PingTimeout how long it waits for the
	// answer (defaults 1 min and 20 s).
	PingInterval, PingTimeout time.Duration
	// MinClientPingInterval is the shortest interval at which a client may
	// ping; a client pinging faster is disconnected (default 10 s, the
	// interval the outbox's own clients use).
	MinClientPingInterval time.Duration
	// MaxHeaderListBytes bounds the headers of one call, which gRPC decodes
	// before the server's tap handle sees them: the decoded size (as HTTP/2
	// counts it: each field's name and value plus 32 bytes) and the bytes of
	// the header block on the wire. Past it the connection is closed and the
	// refusal counted ("header block too large"). Default 16 KiB: the
	// outbox's clients send a few hundred bytes (the path, the content type,
	// the authorization header, a follower's forwarding marks).
	MaxHeaderListBytes int
	// HeaderTimeout bounds the time from the first frame of a header block
	// to its last: a connection whose block is still incomplete then is
	// closed and the refusal counted ("header block too slow"). gRPC itself
	// has no such bound (while its reader waits for the rest of a block it
	// can answer no ping, and its idle timer counts from the last call), so
	// an incomplete block would otherwise hold a connection until the ping
	// timeout or the idle timeout. Default 10 s.
	HeaderTimeout time.Duration
}

// The defaults of GRPCLimits.
const (
	DefaultMaxRecvMsgBytes       = 4 << 20
	DefaultMaxConcurrentStreams  = 32
	DefaultHandshakeTimeout      = 10 * time.Second
	DefaultIdleTimeout           = 5 * time.Minute
	DefaultPingInterval          = time.Minute
	DefaultPingTimeout           = 20 * time.Second
	DefaultMinClientPingInterval = 10 * time.Second
	DefaultMaxHeaderListBytes    = 16 << 10
	DefaultHeaderTimeout         = 10 * time.Second
)

// WithDefaults returns l with every zero field set to its default; a
// negative one is kept, for Validate to report.
func (l GRPCLimits) WithDefaults() GRPCLimits {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if l.MaxRecvMsgBytes == 0 {
		l.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	set(&l.HandshakeTimeout, DefaultHandshakeTimeout)
	set(&l.IdleTimeout, DefaultIdleTimeout)
	set(&l.PingInterval, DefaultPingInterval)
	set(&l.PingTimeout, DefaultPingTimeout)
	set(&l.MinClientPingInterval, DefaultMinClientPingInterval)
	set(&l.HeaderTimeout, DefaultHeaderTimeout)
	if l.MaxHeaderListBytes == 0 {
		l.MaxHeaderListBytes = DefaultMaxHeaderListBytes
	}
	return l
}

// Validate returns one *ports.FieldError per broken rule, joined: every
// field must be positive. It checks l as given, where a zero is no default
// but a value: a configuration loader that fills in the defaults reports a
// zero someone wrote.
func (l GRPCLimits) Validate() error {
	var fe ports.FieldErrors
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxRecvMsgBytes", int64(l.MaxRecvMsgBytes)},
		{"MaxConcurrentStreams", int64(l.MaxConcurrentStreams)},
		{"MaxHeaderListBytes", int64(l.MaxHeaderListBytes)},
	} {
		if f.v <= 0 {
			fe.Add(f.name, "must be positive, got %d (leave it out for the default)", f.v)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"HandshakeTimeout", l.HandshakeTimeout}, {"IdleTimeout", l.IdleTimeout},
		{"PingInterval", l.PingInterval}, {"PingTimeout", l.PingTimeout},
		{"MinClientPingInterval", l.MinClientPingInterval}, {"HeaderTimeout", l.HeaderTimeout},
	} {
		if f.d <= 0 {
			fe.Add(f.name, "must be positive, got %s (leave it out for the default)", f.d)
		}
	}
	return fe.Err()
}

// ServerOptions returns the gRPC server options that apply l (with its
// defaults; Validate must accept them), with creds as the server's transport credentials (nil serves
// plaintext). creds is wrapped so that every connection's header blocks are
// bounded in size and time (MaxHeaderListBytes, HeaderTimeout) and every
// failed TLS handshake is counted; refusals (nil: not counted) records those
// refusals under the client's CallerKey. Do not add grpc.Creds to the
// result. Authentication before decoding is the server's own: install it
// with grpc.InTapHandle, which runs on the request headers before any
// message is read.
func (l GRPCLimits) ServerOptions(creds credentials.TransportCredentials, refusals *Refusals) []grpc.ServerOption {
	l = l.WithDefaults()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if refusals == nil {
		refusals = NewRefusals("grpc", nil, 0)
	}
	return []grpc.ServerOption{
		grpc.Creds(&guardedCreds{TransportCredentials: creds, limits: l, refusals: refusals}),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(uint32(min(l.MaxHeaderListBytes, math.MaxUint32))),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.IdleTimeout,
			Time:              l.PingInterval,
			Timeout:           l.PingTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.MinClientPingInterval,
			PermitWithoutStream: true,
		}),
	}
}
