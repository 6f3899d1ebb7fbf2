package webhook_test

import (
	"net/http"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/webhook"
)

// FuzzSettings fuzzes the webhook channel's settings (timeout, secret) and
// request through Deliver, with no network (see httpdelivertest.FuzzDelivery).
func FuzzSettings(f *testing.F) {
	httpdelivertest.FuzzDelivery(f, func(p *channel.NetworkPolicy) httpdelivertest.Channel {
		return webhook.New(nil, httpdeliver.WithNetworkPolicy(p))
	}, webhook.SecretSetting)
}

// FuzzVerify: what a receiver is sent decides nothing but Verify's answer,
// and a webhook signed with the secret always verifies.
func FuzzVerify(f *testing.F) {
	f.Add("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_1", "1767225600", "v1,abc", []byte(`{"id":"x"}`))
	f.Add("raw secret", "", "", "", []byte(nil))
	f.Add("whsec_", "id", "-1", "v1, v2,x v1,", []byte("body"))
	f.Add("s", "id", "99999999999999999999", "v1,AAAA", []byte("body"))
	now := time.Unix(1767225600, 0)
	f.Fuzz(func(t *testing.T, secret, id, timestamp, signature string, body []byte) {
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, timestamp)
		h.Set(webhook.HeaderSignature, signature)
		_ = webhook.Verify(secret, h, body, time.Minute, now)

		// Sign as the channel does, then verify.
		key, ok := webhook.KeyForTest(secret)
		if !ok || id == "" {
			return
		}
		ts := "1767225600"
		h.Set(webhook.HeaderTimestamp, ts)
		h.Set(webhook.HeaderSignature, "v0,x "+webhook.SignForTest(key, id, ts, body))
		if err := webhook.Verify(secret, h, body, time.Minute, now); err != nil {
			t.Fatalf("a signed webhook does not verify: %v", err)
		}
	})
}
