package teams_test

import (
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/teams"
)

// FuzzSettings fuzzes the Teams channel's settings (timeout) and request
// through Deliver, with no network (see httpdelivertest.FuzzDelivery).
func FuzzSettings(f *testing.F) {
	httpdelivertest.FuzzDelivery(f, func(p *channel.NetworkPolicy) httpdelivertest.Channel {
		return teams.New(nil, httpdeliver.WithNetworkPolicy(p))
	})
}
