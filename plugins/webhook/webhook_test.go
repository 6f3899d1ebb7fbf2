package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/httpdeliver/httpdelivertest"
	"github.com/siteline/outbox/plugins/webhook"
)

// testSecret is a Standard Webhooks secret: whsec_ and the base64 of the key.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestSuite(t *testing.T) {
	httpdelivertest.Suite{
		New:      func(logger *slog.Logger) httpdelivertest.Channel { return webhook.New(logger) },
		Settings: map[string]string{"secret": testSecret},
	}.Run(t)
}

// received is one request as the server saw it.
type received struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// recorder starts a server that answers status and hands every request to
// the returned channel (buffered, so the handler never blocks).
func recorder(t *testing.T, status int) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read the body: %v", err)
		}
		got <- received{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func deliver(t *testing.T, settings map[string]string, n channel.Notification, targets ...string) channel.Result {
	t.Helper()
	ch := webhook.New(nil)
	t.Cleanup(ch.Close)
	return ch.Deliver(t.Context(), channel.Request{Notification: n, Targets: targets, Settings: settings})
}

func TestPayloadAndHeaders(t *testing.T) {
	srv, got := recorder(t, http.StatusOK)
	n := httpdelivertest.Notification("Alarm <high> & \"urgent\"")
	n.TypeData = []byte(`{"severity": "high", "tags": ["a", "b"]}`)
	before := time.Now().Unix()
	res := deliver(t, map[string]string{"secret": testSecret}, n, srv.URL+"/hooks/outbox?token=abc")
	after := time.Now().Unix()
	if res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	if want := srv.URL + "/hooks/outbox"; len(res.ResolvedTargets) != 1 || res.ResolvedTargets[0] != want {
		t.Errorf("resolved %q, want [%s]", res.ResolvedTargets, want)
	}
	r := <-got
	if r.method != http.MethodPost || r.path != "/hooks/outbox" || r.query != "token=abc" {
		t.Errorf("request %s %s?%s, want POST /hooks/outbox?token=abc", r.method, r.path, r.query)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	var p struct {
		ID         string          `json:"id"`
		List       string          `json:"list"`
		Subject    string          `json:"subject"`
		Body       string          `json:"body"`
		SourceSite string          `json:"source_site"`
		Priority   int             `json:"priority"`
		CreatedAt  string          `json:"created_at"`
		Attempt    int             `json:"attempt"`
		TypeData   json.RawMessage `json:"type_data"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	if p.ID != n.ID || p.List != n.List || p.Subject != n.Subject || p.Body != n.Body ||
		p.SourceSite != n.SourceSite || p.Priority != n.Priority || p.Attempt != n.Attempt {
		t.Errorf("payload %+v does not match %+v", p, n)
	}
	if p.CreatedAt != "2026-03-01T12:30:00.123456Z" {
		t.Errorf("created_at %q, want RFC 3339 UTC with the fraction", p.CreatedAt)
	}
	var td struct {
		Severity string   `json:"severity"`
		Tags     []string `json:"tags"`
	}
	if err := json.Unmarshal(p.TypeData, &td); err != nil || td.Severity != "high" || len(td.Tags) != 2 {
		t.Errorf("type_data %s: %+v, %v", p.TypeData, td, err)
	}

	if id := r.header.Get("webhook-id"); id != n.ID {
		t.Errorf("webhook-id %q, want %q", id, n.ID)
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Errorf("webhook-timestamp %q, want between %d and %d", r.header.Get("webhook-timestamp"), before, after)
	}
	if err := webhook.Verify(testSecret, r.header, r.body, 5*time.Minute, time.Now()); err != nil {
		t.Errorf("Verify: %v", err)
	}
	// Independently of Verify: the signature as the specification defines it.
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
	h := hmac.New(sha256.New, key)
	h.Write([]byte(n.ID + "." + r.header.Get("webhook-timestamp") + "."))
	h.Write(r.body)
	if want := "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil)); r.header.Get("webhook-signature") != want {
		t.Errorf("webhook-signature %q, want %q", r.header.Get("webhook-signature"), want)
	}
}

func TestNoTypeData(t *testing.T) {
	srv, got := recorder(t, http.StatusNoContent)
	if res := deliver(t, nil, httpdelivertest.Notification("x"), srv.URL); res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	r := <-got
	var p map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if _, ok := p["type_data"]; ok {
		t.Errorf("type_data present without type data: %s", r.body)
	}
	for _, k := range []string{"id", "list", "subject", "body", "source_site", "priority", "created_at", "attempt"} {
		if _, ok := p[k]; !ok {
			t.Errorf("field %q missing: %s", k, r.body)
		}
	}
}

func TestInvalidTypeDataIsPermanent(t *testing.T) {
	srv, got := recorder(t, http.StatusOK)
	n := httpdelivertest.Notification("x")
	n.TypeData = []byte(`{"unterminated"`)
	if res := deliver(t, nil, n, srv.URL); res.Outcome != channel.Permanent {
		t.Errorf("invalid type data: %v (%q), want Permanent", res.Outcome, res.Error)
	}
	select {
	case r := <-got:
		t.Errorf("the server received %s", r.body)
	default:
	}
}

func TestWithoutSecretNoSignature(t *testing.T) {
	srv, got := recorder(t, http.StatusOK)
	n := httpdelivertest.Notification("x")
	if res := deliver(t, map[string]string{"timeout": "5s"}, n, srv.URL); res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	r := <-got
	if r.header.Get("webhook-id") != n.ID || r.header.Get("webhook-timestamp") == "" {
		t.Errorf("webhook-id %q, webhook-timestamp %q: want both", r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"))
	}
	if _, ok := r.header["Webhook-Signature"]; ok {
		t.Errorf("webhook-signature %q sent without a secret", r.header.Get("webhook-signature"))
	}
}

func TestRawSecret(t *testing.T) {
	const secret = "a plain shared secret"
	srv, got := recorder(t, http.StatusOK)
	if res := deliver(t, map[string]string{"secret": secret}, httpdelivertest.Notification("x"), srv.URL); res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	r := <-got
	if err := webhook.Verify(secret, r.header, r.body, time.Minute, time.Now()); err != nil {
		t.Errorf("Verify with the raw secret: %v", err)
	}
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(r.header.Get("webhook-id") + "." + r.header.Get("webhook-timestamp") + "."))
	h.Write(r.body)
	if want := "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil)); r.header.Get("webhook-signature") != want {
		t.Errorf("webhook-signature %q, want %q (raw bytes as the key)", r.header.Get("webhook-signature"), want)
	}
}

func TestInvalidSecretIsPermanent(t *testing.T) {
	srv, got := recorder(t, http.StatusOK)
	const secret = "whsec_not*base64!"
	res := deliver(t, map[string]string{"secret": secret}, httpdelivertest.Notification("x"), srv.URL)
	if res.Outcome != channel.Permanent {
		t.Errorf("invalid secret: %v (%q), want Permanent", res.Outcome, res.Error)
	}
	if strings.Contains(res.Error, "not*base64") {
		t.Errorf("the error %q repeats the secret", res.Error)
	}
	select {
	case r := <-got:
		t.Errorf("the server received %s", r.body)
	default:
	}
}

// signed delivers one notification and returns what the server received.
func signed(t *testing.T) received {
	t.Helper()
	srv, got := recorder(t, http.StatusOK)
	if res := deliver(t, map[string]string{"secret": testSecret}, httpdelivertest.Notification("x"), srv.URL); res.Outcome != channel.Success {
		t.Fatalf("Deliver: %v (%q)", res.Outcome, res.Error)
	}
	return <-got
}

func TestVerifyRejectsReplays(t *testing.T) {
	r := signed(t)
	sent, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(sent, 0)
	if err := webhook.Verify(testSecret, r.header, r.body, 5*time.Minute, at.Add(5*time.Minute)); err != nil {
		t.Errorf("Verify at the edge of the tolerance: %v", err)
	}
	for _, now := range []time.Time{at.Add(5*time.Minute + time.Second), at.Add(time.Hour), at.Add(-10 * time.Minute)} {
		if err := webhook.Verify(testSecret, r.header, r.body, 5*time.Minute, now); !errors.Is(err, webhook.ErrTimestamp) {
			t.Errorf("Verify %v after sending: %v, want ErrTimestamp", now.Sub(at), err)
		}
	}
	if err := webhook.Verify(testSecret, r.header, r.body, 0, at.Add(6*time.Minute)); !errors.Is(err, webhook.ErrTimestamp) {
		t.Errorf("Verify with the default tolerance 6 minutes later: %v, want ErrTimestamp", err)
	}
	// A replay with a fresh timestamp but the old signature.
	h := r.header.Clone()
	h.Set("webhook-timestamp", strconv.FormatInt(sent+600, 10))
	if err := webhook.Verify(testSecret, h, r.body, 5*time.Minute, at.Add(10*time.Minute)); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("Verify with a forged timestamp: %v, want ErrSignature", err)
	}
	h.Set("webhook-timestamp", "yesterday")
	if err := webhook.Verify(testSecret, h, r.body, 5*time.Minute, at); !errors.Is(err, webhook.ErrTimestamp) {
		t.Errorf("Verify with a malformed timestamp: %v, want ErrTimestamp", err)
	}
}

func TestVerifyRejectsTampering(t *testing.T) {
	r := signed(t)
	now := time.Now()
	tampered := []byte(strings.Replace(string(r.body), `"priority":1`, `"priority":9`, 1))
	if string(tampered) == string(r.body) {
		t.Fatalf("the test did not change the body %s", r.body)
	}
	if err := webhook.Verify(testSecret, r.header, tampered, time.Minute, now); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("tampered body: %v, want ErrSignature", err)
	}
	if err := webhook.Verify("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key")), r.header, r.body, time.Minute, now); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("another secret: %v, want ErrSignature", err)
	}
	h := r.header.Clone()
	h.Set("webhook-id", "0190c1b4-0000-7000-8000-000000000000")
	if err := webhook.Verify(testSecret, h, r.body, time.Minute, now); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("another id: %v, want ErrSignature", err)
	}
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		h := r.header.Clone()
		h.Del(name)
		if err := webhook.Verify(testSecret, h, r.body, time.Minute, now); !errors.Is(err, webhook.ErrMissingHeader) {
			t.Errorf("without %s: %v, want ErrMissingHeader", name, err)
		}
	}
	if err := webhook.Verify("whsec_%%%", r.header, r.body, time.Minute, now); !errors.Is(err, webhook.ErrSecret) {
		t.Errorf("malformed secret: %v, want ErrSecret", err)
	}
	// Several signatures (a key rotation): one valid is enough.
	h = r.header.Clone()
	h.Set("webhook-signature", "v1,AAAA v2,whatever "+r.header.Get("webhook-signature"))
	if err := webhook.Verify(testSecret, h, r.body, time.Minute, now); err != nil {
		t.Errorf("with a valid signature among others: %v", err)
	}
	h.Set("webhook-signature", "v1a,"+strings.TrimPrefix(r.header.Get("webhook-signature"), "v1,"))
	if err := webhook.Verify(testSecret, h, r.body, time.Minute, now); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("valid signature under another version: %v, want ErrSignature", err)
	}
}

// TestVerifyStandardWebhooksVector checks Verify against the example of the
// Standard Webhooks reference libraries.
func TestVerifyStandardWebhooksVector(t *testing.T) {
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	if err := webhook.Verify(testSecret, h, []byte(`{"test": 2432232314}`), time.Minute, time.Unix(1614265330, 0)); err != nil {
		t.Errorf("Verify(reference example): %v", err)
	}
}

func TestDescribe(t *testing.T) {
	d, err := webhook.New(nil).Describe(t.Context())
	if err != nil || d.Name != "webhook" || d.Version == "" {
		t.Fatalf("Describe: %+v, %v", d, err)
	}
	var secret bool
	for _, s := range d.Settings {
		if s.Name == "secret" {
			secret = s.Secret && !s.Required
		}
	}
	if !secret {
		t.Errorf("settings %+v: want an optional secret setting marked Secret", d.Settings)
	}
	if err := d.Validate(map[string]string{}); err != nil {
		t.Errorf("Validate(no settings): %v", err)
	}
}

// BenchmarkWebhook measures signed deliveries in parallel to one loopback
// server.
func BenchmarkWebhook(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	ch := webhook.New(nil)
	defer ch.Close()
	req := channel.Request{
		Notification: httpdelivertest.Notification("benchmark"),
		Targets:      []string{srv.URL + "/hook"},
		Settings:     map[string]string{"secret": testSecret},
	}
	b.ReportAllocs()
	// Many deliveries in flight at once, as under central's dispatcher
	// (DispatchConcurrency 32 by default), whatever GOMAXPROCS is.
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := ch.Deliver(b.Context(), req); res.Outcome != channel.Success {
				b.Errorf("Deliver: %v (%q)", res.Outcome, res.Error)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}
