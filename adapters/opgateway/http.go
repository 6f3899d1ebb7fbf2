package opgateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/siteline/outbox/plugins/httpdeliver"
	"github.com/siteline/outbox/ports"
)

// MaxAnswerBytes bounds the body of a call's answer kept as its Answer.
// A longer answer is still a Success (the system did the call), and its
// Answer is AnswerDropped.
const MaxAnswerBytes = 1 << 20

// AnswerDropped is the Answer of a successful call whose body is over
// MaxAnswerBytes.
var AnswerDropped = json.RawMessage(`{"outbox_answer_dropped":"the answer is over 1048576 bytes"}`)

// MaxRetryAfter caps a system's Retry-After.
const MaxRetryAfter = httpdeliver.MaxRetryAfter

// Limits on reading a failed answer: its body is read up to errorBodyLimit
// for the error's text, and any answer drained up to drainLimit so that
// its connection can be reused.
const (
	errorBodyLimit = 4 << 10
	drainLimit     = 64 << 10
)

// UserAgent is sent with every call.
const UserAgent = "siteline-outbox"

// newHTTPClient returns a client over rt, or over a transport of its own
// that trusts roots (nil: the machine's authorities).
func newHTTPClient(rt http.RoundTripper, roots *x509.CertPool) *http.Client {
	if rt == nil || roots != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// As many idle connections per system as calls run at once (the
		// site API runs up to 256 per connection, the redelivery 16), so
		// that a busy system's connections are kept rather than dialled
		// again after each call.
		t.MaxIdleConnsPerHost = 256
		if roots != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		}
		rt = t
	}
	return &http.Client{
		Transport: rt,
		// A redirect is answered as is, a Permanent failure: following it
		// would send the credentials and the data elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// readCAFile reads a PEM file of certificate authorities, a relative path
// against base.
func readCAFile(path, base string) (*x509.CertPool, error) {
	if !filepath.IsAbs(path) && base != "" {
		path = filepath.Join(base, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b) {
		return nil, errors.New("the file holds no PEM certificate")
	}
	return roots, nil
}

// request is a call built from a method and its parameters.
type request struct {
	path  string // escaped
	query url.Values
	body  []byte // nil for GET and DELETE
}

// build places a call's params: the members named in the path template
// fill it (strings, numbers and booleans); the others go to a JSON object
// body for POST, PUT and PATCH (as given, in order), and to the query for
// GET and DELETE (a scalar is one value, an array of scalars one value per
// element, null none; objects are refused).
func (m *method) build(params json.RawMessage) (request, error) {
	ps, err := decodeParams(params)
	if err != nil {
		return request{}, err
	}
	var r request
	inPath := make(map[string]string, len(m.tmpl.names))
	var body bytes.Buffer
	if m.body {
		body.WriteByte('{')
	}
	for _, p := range ps {
		if slices.Contains(m.tmpl.names, p.name) {
			s, ok, err := scalarText(p.value)
			if err != nil || !ok {
				return request{}, fmt.Errorf("path parameter %s must be a string, a number or a boolean", quoteName(p.name))
			}
			inPath[p.name] = s
			continue
		}
		if m.body {
			if body.Len() > 1 {
				body.WriteByte(',')
			}
			k, _ := json.Marshal(p.name)
			body.Write(k)
			body.WriteByte(':')
			body.Write(p.value)
			continue
		}
		vs, err := queryValues(p.value)
		if err != nil {
			return request{}, fmt.Errorf("parameter %s of a %s: %v", quoteName(p.name), m.Verb, err)
		}
		if len(vs) > 0 {
			if r.query == nil {
				r.query = url.Values{}
			}
			r.query[p.name] = append(r.query[p.name], vs...)
		}
	}
	if r.path, err = m.tmpl.fill(inPath); err != nil {
		return request{}, err
	}
	if m.body {
		body.WriteByte('}')
		r.body = body.Bytes()
	}
	return r, nil
}

// call makes one HTTP call of op to s.
func (g *Gateway) call(ctx context.Context, s *system, m *method, op ports.Operation) ports.OpResult {
	what := m.Verb + " " + m.Path
	r, err := m.build(op.Payload.Params)
	if err != nil {
		return ports.OpResult{Outcome: ports.OutcomePermanent, Error: what + ": " + err.Error()}
	}
	header, secrets, err := g.authHeader(s)
	if err != nil {
		return ports.OpResult{Outcome: ports.OutcomeTransient, Error: what + ": " + err.Error()}
	}
	target := s.BaseURL + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	actx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(actx, m.Verb, target, body)
	if err != nil {
		// Its text quotes the URL: leave it out.
		return ports.OpResult{Outcome: ports.OutcomePermanent, Error: what + ": the request cannot be built"}
	}
	// The system's headers may replace User-Agent and Accept, not what
	// follows them (Validate refuses those names).
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Accept", "application/json")
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Idempotency-Key", op.ID)
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	resp, err := s.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return transient(what + ": no answer before the attempt ended")
		case actx.Err() != nil:
			return transient(fmt.Sprintf("%s: no answer within the timeout of %s", what, s.Timeout))
		}
		return transient(what + ": " + httpdeliver.NetErrorText(err, secrets))
	}
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		_ = resp.Body.Close()
	}()

	status := resp.StatusCode
	if status >= 200 && status <= 299 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
		if err != nil {
			// The system did the call; only its answer is cut.
			return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: json.RawMessage("null")}
		}
		return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: answer(b)}
	}
	res := ports.OpResult{Outcome: ports.OutcomePermanent}
	if status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || (status >= 500 && status <= 599) {
		res.Outcome = ports.OutcomeTransient
		res.RetryAfter = httpdeliver.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	text := what + ": HTTP " + strconv.Itoa(status)
	if st := http.StatusText(status); st != "" {
		text += " " + st
	}
	if status >= 300 && status <= 399 {
		text += " (redirects are not followed)"
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	if quoted := httpdeliver.Sanitize(b, secrets...); quoted != "" {
		text += ": " + strconv.Quote(quoted)
	}
	res.Error = text
	return res
}

func transient(msg string) ports.OpResult {
	return ports.OpResult{Outcome: ports.OutcomeTransient, Error: msg}
}

// answer turns a 2xx body into the call's Answer: the body when it is
// JSON (valid UTF-8), a JSON string of it otherwise (invalid UTF-8
// replaced), null when empty, AnswerDropped when over MaxAnswerBytes.
func answer(b []byte) json.RawMessage {
	if len(b) > MaxAnswerBytes {
		return AnswerDropped
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return json.RawMessage("null")
	}
	if utf8.Valid(t) && json.Valid(t) {
		return json.RawMessage(t)
	}
	s, _ := json.Marshal(strings.ToValidUTF8(string(b), "\uFFFD"))
	return s
}

// authHeader resolves s's auth into the header it sends, and returns the
// secrets an error text must never hold.
func (g *Gateway) authHeader(s *system) (http.Header, []string, error) {
	a := s.Auth
	if a.Kind == AuthNone {
		return nil, nil, nil
	}
	ref := map[string]string{AuthBearer: a.Token, AuthBasic: a.Password, AuthHeader: a.Value}[a.Kind]
	secret, err := g.secrets.Resolve(ref)
	if err != nil {
		// A RefError names the reference, never its value.
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	if secret == "" {
		return nil, nil, fmt.Errorf("auth: %s resolves to an empty secret", ref)
	}
	var name, value string
	switch a.Kind {
	case AuthBearer:
		name, value = "Authorization", "Bearer "+secret
	case AuthBasic:
		name, value = "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(a.User+":"+secret))
	case AuthHeader:
		name, value = a.Header, secret
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return nil, nil, fmt.Errorf("auth: the secret of %s holds a control character", ref)
	}
	h := http.Header{}
	h.Set(name, value)
	// The credentials without their scheme too: a server may echo them
	// alone.
	_, cred, _ := strings.Cut(value, " ")
	return h, []string{value, cred, secret}, nil
}
