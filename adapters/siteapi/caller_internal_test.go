package siteapi

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/siteline/outbox/adapters/siteapi/internal/pb"
	"github.com/siteline/outbox/ports"
)

// nullSite is a ports.Site that answers nothing: tap never calls it.
type nullSite struct{}

func (nullSite) Send(context.Context, ports.SendRequest) (string, error) { return "", nil }
func (nullSite) Status(context.Context, []string) (map[string]ports.Status, error) {
	return nil, nil
}
func (nullSite) Health(context.Context) (ports.SiteHealth, error) { return ports.SiteHealth{}, nil }

// TestIPv6CallersAreLimitedByTheirSlash64 plays a token holder that takes a
// new address of its /64 for every call, to get a fresh bucket each time
// (and fill the limiter's table, pushing new callers into its shared
// overflow bucket): its calls share one bucket; a caller of another /64
// keeps its own.
func TestIPv6CallersAreLimitedByTheirSlash64(t *testing.T) {
	s, err := NewServer(ServerConfig{Site: nullSite{}, Token: "s3cret", Limits: Limits{Rate: 0.001, Burst: 3}})
	if err != nil {
		t.Fatal(err)
	}
	call := func(ip string) error {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
		_, err := s.tap(ctx, &tap.Info{FullMethodName: pb.Site_Send_FullMethodName,
			Header: metadata.Pairs("authorization", "Bearer s3cret")})
		return err
	}
	for i, ip := range []string{"2001:db8:7:7::1", "2001:db8:7:7::2", "2001:db8:7:7:abcd::3"} {
		if err := call(ip); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	if err := call("2001:db8:7:7:ffff:ffff:ffff:fff0"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth call from a new address of the same /64: %v, want ResourceExhausted", err)
	}
	if err := call("2001:db8:7:8::1"); err != nil {
		t.Fatalf("a call from another /64: %v", err)
	}
	if n := s.Refusals().Count("rate limited"); n != 1 {
		t.Fatalf("rate-limit refusals counted: %d, want 1", n)
	}
}
