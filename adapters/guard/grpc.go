package guard

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
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
)

// WithDefaults returns l with every zero field set to its default.
func (l GRPCLimits) WithDefaults() GRPCLimits {
	set := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if l.MaxRecvMsgBytes <= 0 {
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
	return l
}

// ServerOptions returns the gRPC server options that apply l (with its
// defaults). Authentication before decoding is the server's own: install it
// with grpc.InTapHandle, which runs on the request headers before any
// message is read.
func (l GRPCLimits) ServerOptions() []grpc.ServerOption {
	l = l.WithDefaults()
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
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
