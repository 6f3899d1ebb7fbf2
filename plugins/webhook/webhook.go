// Package webhook is the generic webhook channel: it POSTs every notification
// as JSON to each target URL, signed per the Standard Webhooks specification
// (https://www.standardwebhooks.com), so that a receiver can check who sent
// it and drop replays and repeats.
//
// Every POST carries the headers webhook-id (the notification's id, the same
// for every attempt), webhook-timestamp (Unix seconds of the attempt) and,
// when the channel has a secret, webhook-signature:
//
//	v1,<base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))>
//
// A receiver checks them with Verify.
//
// Each target is answered on its own (2xx Success; 408, 429, 5xx and network
// failures Transient, with that target's Retry-After; any other answer
// Permanent): central retries only the targets that failed, so a receiver
// that answered 2xx gets no second POST because another target failed.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
)

const (
	// Name is the notification type the channel delivers.
	Name = "webhook"
	// Version is the channel's version.
	Version = "1.0.0"
	// SecretSetting names the optional signing secret: "whsec_" followed by
	// base64, or any other text taken as raw key bytes.
	SecretSetting = "secret"
)

// Payload is the JSON body of every POST.
type Payload struct {
	// ID is the notification's id; a receiver drops a repeat by it.
	ID string `json:"id"`
	// List is the list the notification is addressed to.
	List string `json:"list"`
	// Subject and Body are plain text.
	Subject string `json:"subject"`
	Body    string `json:"body"`
	// SourceSite is the site that sent the notification.
	SourceSite string `json:"source_site"`
	// Priority is the dispatch priority (higher first).
	Priority int `json:"priority"`
	// CreatedAt is when central accepted the notification, in UTC.
	CreatedAt time.Time `json:"created_at"`
	// Attempt counts delivery attempts, this one included.
	Attempt int `json:"attempt"`
	// TypeData is the notification's type-specific JSON, absent when it has
	// none.
	TypeData json.RawMessage `json:"type_data,omitempty"`
}

// Channel delivers notifications to webhooks. It is safe for concurrent use.
type Channel struct {
	client *httpdeliver.Client
}

var (
	_ channel.Channel   = (*Channel)(nil)
	_ channel.Describer = (*Channel)(nil)
)

// New returns a webhook channel logging to logger (nil discards). Its
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
			{
				Name: SecretSetting,
				Description: "Key that signs every POST (webhook-signature header, Standard Webhooks): " +
					"\"whsec_\" followed by the base64 key, or any other text used as the key's bytes. " +
					"Without it POSTs are not signed.",
				Secret: true,
			},
			httpdeliver.TimeoutSetting(),
		},
	}, nil
}

// Deliver POSTs the notification to every target and answers for each
// (see httpdeliver.Client.Deliver). The resolved targets are the delivered
// ones as scheme://host/path, without user information or query.
func (c *Channel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	timeout, err := httpdeliver.Timeout(req.Settings)
	if err != nil {
		return channel.Fail(err)
	}
	var key []byte
	if secret := req.Settings[SecretSetting]; secret != "" {
		if key, err = decodeSecret(secret); err != nil {
			return channel.Fail(err)
		}
	}
	n := req.Notification
	body, err := json.Marshal(Payload{
		ID:         n.ID,
		List:       n.List,
		Subject:    n.Subject,
		Body:       n.Body,
		SourceSite: n.SourceSite,
		Priority:   n.Priority,
		CreatedAt:  n.CreatedAt.UTC(),
		Attempt:    n.Attempt,
		TypeData:   n.TypeData,
	})
	if err != nil {
		return channel.Fail(fmt.Errorf("encode the payload (is the type data valid JSON?): %w", err))
	}
	timestamp := strconv.FormatInt(time.Now().Unix(), 10)
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set(HeaderID, n.ID)
	header.Set(HeaderTimestamp, timestamp)
	if key != nil {
		header.Set(HeaderSignature, sign(key, n.ID, timestamp, body))
	}
	return c.client.Deliver(ctx, req.Targets, httpdeliver.Message{
		ID:      n.ID,
		Body:    body,
		Header:  header,
		Timeout: timeout,
		Redact:  httpdeliver.RedactQuery,
	})
}
