// Package slack is the Slack channel: it posts every notification to Slack
// incoming webhooks (https://api.slack.com/messaging/webhooks), one per
// target URL, as a message whose first line is the subject in bold.
//
// Slack answers 200 "ok" on success and a short code on failure
// ("invalid_payload", "no_service", "channel_is_archived", ...), which the
// result's error quotes. A webhook URL is a credential: resolved targets show
// only its scheme and host.
//
// Each target is answered on its own (2xx Success; 408, 429, 5xx and network
// failures Transient, with that target's Retry-After; any other answer
// Permanent): central retries only the targets that failed, so a receiver
// that answered 2xx gets no second POST because another target failed.
package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
)

const (
	// Name is the notification type the channel delivers.
	Name = "slack"
	// Version is the channel's version.
	Version = "1.0.0"
	// UsernameSetting names the optional display name of the messages.
	UsernameSetting = "username"
	// IconEmojiSetting names the optional emoji shown as the messages' icon.
	IconEmojiSetting = "icon_emoji"
)

// Payload is the JSON body of every POST.
type Payload struct {
	// Text is the message in Slack mrkdwn.
	Text string `json:"text"`
	// Username overrides the display name, where Slack allows it.
	Username string `json:"username,omitempty"`
	// IconEmoji overrides the icon, where Slack allows it.
	IconEmoji string `json:"icon_emoji,omitempty"`
}

// Channel delivers notifications to Slack. It is safe for concurrent use.
type Channel struct {
	client *httpdeliver.Client
}

var (
	_ channel.Channel   = (*Channel)(nil)
	_ channel.Describer = (*Channel)(nil)
)

// New returns a Slack channel logging to logger (nil discards). Its
// connections obey the delivery network policy central passed to the
// process, or the one an option gives (httpdeliver.WithNetworkPolicy).
func New(logger *slog.Logger, opts ...httpdeliver.Option) *Channel {
	return &Channel{client: httpdeliver.NewClient(logger, Name, opts...)}
}

// Close releases the channel's idle connections.
func (c *Channel) Close() { c.client.Close() }

// Describe returns the channel's name, version and settings schema.
func (c *Channel) Describe(context.Context) (channel.Description, error) {
	return channel.Description{
		Name:    Name,
		Version: Version,
		Settings: []channel.Setting{
			httpdeliver.TimeoutSetting(),
			{
				Name: UsernameSetting,
				Description: "Display name of the messages. Slack ignores it for webhooks of Slack apps, " +
					"which always post under the app's name.",
			},
			{
				Name: IconEmojiSetting,
				Description: "Emoji shown as the messages' icon, as :name:. Slack ignores it for webhooks " +
					"of Slack apps.",
			},
		},
	}, nil
}

// Deliver posts the notification to every target and answers for each
// (see httpdeliver.Client.Deliver).
func (c *Channel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	timeout, err := httpdeliver.Timeout(req.Settings)
	if err != nil {
		return channel.Fail(err)
	}
	icon := strings.TrimSpace(req.Settings[IconEmojiSetting])
	if icon != "" && (len(icon) < 3 || !strings.HasPrefix(icon, ":") || !strings.HasSuffix(icon, ":")) {
		return channel.Fail(fmt.Errorf("setting %q: must be an emoji code, a name between colons (:bell:)", IconEmojiSetting))
	}
	body, err := json.Marshal(Payload{
		Text:      Text(req.Notification.Subject, req.Notification.Body),
		Username:  strings.TrimSpace(req.Settings[UsernameSetting]),
		IconEmoji: icon,
	})
	if err != nil {
		return channel.Fail(fmt.Errorf("encode the Slack payload: %w", err))
	}
	return c.client.Deliver(ctx, req.Targets, httpdeliver.Message{
		ID:      req.Notification.ID,
		Body:    body,
		Timeout: timeout,
		Redact:  httpdeliver.RedactPath,
	})
}

// escaper escapes the three characters Slack mrkdwn gives a meaning to.
var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Text returns a notification as Slack mrkdwn: "*subject*\nbody", with &, <
// and > escaped so that text cannot become a link or a mention. A blank
// subject leaves only the body, a blank body only the subject.
func Text(subject, body string) string {
	subject, body = strings.TrimSpace(subject), strings.TrimSpace(body)
	switch {
	case subject == "":
		return escaper.Replace(body)
	case body == "":
		return "*" + escaper.Replace(subject) + "*"
	}
	return "*" + escaper.Replace(subject) + "*\n" + escaper.Replace(body)
}
