package channel

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// Handshake is the go-plugin handshake of version 1 of the contract. Central
// and a plugin refuse each other unless both sides use these values; the
// cookie only keeps a plugin binary from being run by hand by mistake, it is
// not a security measure (mutual TLS and the checksum pin are).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "OUTBOX_CHANNEL_PLUGIN",
	MagicCookieValue: "4f1c9e3a-outbox-channel-v1",
}

// PluginName is the name a channel is served and dispensed under.
const PluginName = "channel"

// PluginMap is the plugin set of a process serving ch. Central passes a
// PluginMap(nil) (plus its own options, see GRPCPlugin) to go-plugin's client.
func PluginMap(ch Channel) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: ch}}
}

// GRPCPlugin is the go-plugin glue of a channel: on the plugin side it serves
// Impl over gRPC, on central's side it dispenses a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the channel served (plugin side only).
	Impl Channel
	// OnCallError, when set on central's side, is told of every failed gRPC
	// call: a crashed plugin shows up here first.
	OnCallError func(error)
	// gate is Serve's: it lets the process drain on SIGTERM (plugin side).
	gate *gate
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the channel service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterChannelServer(s, &grpcServer{impl: p.Impl, gate: p.gate})
	return nil
}

// GRPCClient returns a *Client talking to the plugin over conn (central's
// side).
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return NewClient(conn, p.OnCallError), nil
}
