package slack_test

import (
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/slack"
)

// FuzzSettings fuzzes the Slack channel's settings (timeout, username,
// icon_emoji) and request through Deliver, with no network (see
// httpdelivertest.FuzzDelivery).
func FuzzSettings(f *testing.F) {
	httpdelivertest.FuzzDelivery(f, func(p *channel.NetworkPolicy) httpdelivertest.Channel {
		return slack.New(nil, httpdeliver.WithNetworkPolicy(p))
	}, slack.UsernameSetting, slack.IconEmojiSetting)
}
