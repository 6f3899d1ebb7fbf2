package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers.
const (
	// HeaderID carries the notification's id.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the attempt's time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries space-separated "v1,<base64>" signatures.
	HeaderSignature = "webhook-signature"
)

// secretPrefix marks a secret whose remainder is the base64 of the key.
const secretPrefix = "whsec_"

// DefaultTolerance is the tolerance Verify applies when given none: the
// Standard Webhooks recommendation of five minutes.
const DefaultTolerance = 5 * time.Minute

// Errors wrapped by Verify's errors.
var (
	// ErrMissingHeader: a webhook-id, webhook-timestamp or
	// webhook-signature header is absent.
	ErrMissingHeader = errors.New("missing webhook header")
	// ErrTimestamp: the timestamp is malformed or too far from now, as a
	// replay would be.
	ErrTimestamp = errors.New("webhook timestamp out of tolerance")
	// ErrSignature: no v1 signature matches the body.
	ErrSignature = errors.New("webhook signature does not match")
	// ErrSecret: the secret has the whsec_ prefix but no valid base64 key
	// after it, or is empty.
	ErrSecret = errors.New("invalid webhook secret")
)

// decodeSecret returns the key bytes of a secret: the base64-decoded
// remainder of a "whsec_" secret, the raw bytes of any other. Its errors
// never repeat the secret.
func decodeSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		if secret == "" {
			return nil, fmt.Errorf("setting %q: empty: %w", SecretSetting, ErrSecret)
		}
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(rest)
	}
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("setting %q: %s must be followed by a base64 key: %w", SecretSetting, secretPrefix, ErrSecret)
	}
	return key, nil
}

// mac returns HMAC-SHA256(key, id.timestamp.body).
func mac(key []byte, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// sign returns the webhook-signature value for one POST.
func sign(key []byte, id, timestamp string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
}

// Verify checks a received webhook: its three headers are present, its
// timestamp is within tolerance of now (in either direction; a tolerance of
// 0 or less means DefaultTolerance), and one of its v1 signatures is the
// HMAC-SHA256 under secret of id.timestamp.body. secret is given as in the
// channel's setting ("whsec_" + base64, or raw text). The errors wrap
// ErrMissingHeader, ErrTimestamp, ErrSignature or ErrSecret. A receiver that
// must also reject a replay within the tolerance remembers the ids it has
// seen for that long.
func Verify(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := decodeSecret(secret)
	if err != nil {
		return fmt.Errorf("verify webhook: %w", err)
	}
	id, timestamp, signatures := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	for _, h := range [...]struct{ name, value string }{
		{HeaderID, id}, {HeaderTimestamp, timestamp}, {HeaderSignature, signatures},
	} {
		if h.value == "" {
			return fmt.Errorf("verify webhook: %s: %w", h.name, ErrMissingHeader)
		}
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("verify webhook: not Unix seconds: %w", ErrTimestamp)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("verify webhook: %s off, tolerance %s: %w", d.Round(time.Second), tolerance, ErrTimestamp)
	}
	want := mac(key, id, timestamp, body)
	for _, s := range strings.Fields(signatures) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("verify webhook: %w", ErrSignature)
}
