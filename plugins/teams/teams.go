// Package teams is the Microsoft Teams channel: it posts every notification
// as an Adaptive Card to Teams webhooks, one per target URL. The same message
// works with the legacy Office 365 incoming webhooks (which answer 200) and
// with Power Automate "Workflows" webhooks (which answer 202 Accepted).
//
// A webhook URL is a credential (a Workflows URL carries its signature in
// the query): resolved targets show only its scheme and host.
//
// Each target is answered on its own (2xx Success; 408, 429, 5xx and network
// failures Transient, with that target's Retry-After; any other answer
// Permanent): central retries only the targets that failed, so a receiver
// that answered 2xx gets no second POST because another target failed.
package teams

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
)

const (
	// Name is the notification type the channel delivers.
	Name = "teams"
	// Version is the channel's version.
	Version = "1.0.0"
)

// Message is the JSON body of every POST: a message with one Adaptive Card.
type Message struct {
	// Type is always "message".
	Type string `json:"type"`
	// Attachments holds the one card.
	Attachments []Attachment `json:"attachments"`
}

// Attachment is an attachment of a Message.
type Attachment struct {
	// ContentType is "application/vnd.microsoft.card.adaptive".
	ContentType string `json:"contentType"`
	// Content is the card itself.
	Content Card `json:"content"`
}

// Card is an Adaptive Card.
type Card struct {
	// Schema is the URL of the Adaptive Card schema.
	Schema string `json:"$schema"`
	// Type is always "AdaptiveCard".
	Type string `json:"type"`
	// Version is the Adaptive Card version the card needs ("1.4").
	Version string `json:"version"`
	// Body holds the card's elements, top to bottom.
	Body []TextBlock `json:"body"`
}

// TextBlock is an Adaptive Card text element.
type TextBlock struct {
	// Type is always "TextBlock".
	Type string `json:"type"`
	// Text is the text shown.
	Text string `json:"text"`
	// Weight is the font weight ("Bolder"); empty for the default.
	Weight string `json:"weight,omitempty"`
	// Size is the font size ("Medium"); empty for the default.
	Size string `json:"size,omitempty"`
	// Wrap lets long text wrap instead of being cut.
	Wrap bool `json:"wrap"`
}

// NewMessage returns the Teams message of a notification: the subject in a
// bold, medium text block above the body.
func NewMessage(subject, body string) Message {
	return Message{
		Type: "message",
		Attachments: []Attachment{{
			ContentType: "application/vnd.microsoft.card.adaptive",
			Content: Card{
				Schema:  "http://adaptivecards.io/schemas/adaptive-card.json",
				Type:    "AdaptiveCard",
				Version: "1.4",
				Body: []TextBlock{
					{Type: "TextBlock", Text: subject, Weight: "Bolder", Size: "Medium", Wrap: true},
					{Type: "TextBlock", Text: body, Wrap: true},
				},
			},
		}},
	}
}

// Channel delivers notifications to Teams. It is safe for concurrent use.
type Channel struct {
	client *httpdeliver.Client
}

var (
	_ channel.Channel   = (*Channel)(nil)
	_ channel.Describer = (*Channel)(nil)
)

// New returns a Teams channel logging to logger (nil discards). Its
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
		Name:     Name,
		Version:  Version,
		Settings: []channel.Setting{httpdeliver.TimeoutSetting()},
	}, nil
}

// Deliver posts the notification to every target and answers for each
// (see httpdeliver.Client.Deliver).
func (c *Channel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	timeout, err := httpdeliver.Timeout(req.Settings)
	if err != nil {
		return channel.Fail(err)
	}
	body, err := json.Marshal(NewMessage(req.Notification.Subject, req.Notification.Body))
	if err != nil {
		return channel.Fail(fmt.Errorf("encode the Teams message: %w", err))
	}
	return c.client.Deliver(ctx, req.Targets, httpdeliver.Message{
		ID:      req.Notification.ID,
		Body:    body,
		Timeout: timeout,
		Redact:  httpdeliver.RedactPath,
	})
}
