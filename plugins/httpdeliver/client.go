package httpdeliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// Connection pool sizes: central runs DispatchConcurrency (32 by default)
// deliveries at once per node, often to one host (hooks.slack.com), so idle
// connections per host must exceed that or every burst opens new ones.
const (
	maxIdleConns        = 512
	maxIdleConnsPerHost = 128
	idleConnTimeout     = 90 * time.Second
)

// maxTargetsInFlight bounds the POSTs of one request running at once.
const maxTargetsInFlight = 8

// Limits on reading an answer's body: a failed answer is read up to
// errorBodyLimit for its error text; any answer is drained up to drainLimit
// so that its connection can be reused.
const (
	errorBodyLimit = 4 << 10
	drainLimit     = 64 << 10
)

// UserAgent is sent with every POST unless the message sets its own.
const UserAgent = "siteline-outbox"

// ErrNoTargets is the error of a request without targets.
var ErrNoTargets = errors.New("no targets")

// Client posts messages to HTTP targets. It holds one connection pool; a
// channel makes one Client and shares it between all its deliveries. It is
// safe for concurrent use.
type Client struct {
	transport *http.Transport
	client    *http.Client
	logger    *slog.Logger
	now       func() time.Time
}

// Option changes how NewClient builds a Client.
type Option func(*options)

type options struct {
	policy *channel.NetworkPolicy
}

// WithNetworkPolicy makes the Client connect under policy instead of the
// one central passed to the process (channel.NetworkPolicyFromEnv).
func WithNetworkPolicy(policy *channel.NetworkPolicy) Option {
	return func(o *options) { o.policy = policy }
}

// NewClient returns the Client of the channel named channelName, logging
// to logger (nil discards) with the channel's name. It never follows
// redirects: a 3xx answer is a Permanent failure. Every connection obeys
// the delivery network policy central passed to the process (see
// channel.NetworkPolicyFromEnv), checked at connect time on the address
// actually dialled; a refused connection is a Permanent failure.
func NewClient(logger *slog.Logger, channelName string, opts ...Option) *Client {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if channelName != "" {
		logger = logger.With("channel", channelName)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.policy == nil {
		o.policy = channel.NetworkPolicyFromEnv()
	}
	if err := o.policy.Err(); err != nil {
		logger.Error("the delivery network policy is malformed: every delivery will be refused", "err", err)
	}
	transport := o.policy.Transport()
	dialer := o.policy.Dialer()
	dialer.Timeout = 10 * time.Second
	transport.DialContext = dialer.DialContext
	transport.MaxIdleConns = maxIdleConns
	transport.MaxIdleConnsPerHost = maxIdleConnsPerHost
	transport.IdleConnTimeout = idleConnTimeout
	return &Client{
		transport: transport,
		client: &http.Client{
			Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		logger: logger,
		now:    time.Now,
	}
}

// Close closes the idle connections of the pool. The Client stays usable: a
// later POST opens a new connection.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// Message is what a channel posts to every target of one request.
type Message struct {
	// ID is the notification's id, for logs.
	ID string
	// Body is the payload, posted as is to every target.
	Body []byte
	// Header holds the request's headers. Content-Type defaults to
	// application/json and User-Agent to UserAgent.
	Header http.Header
	// Timeout bounds each POST, from dialling to the end of the answer's
	// body; 0 means DefaultTimeout. The context's deadline still applies.
	Timeout time.Duration
	// Redact gives a delivered target's form in Result.ResolvedTargets; nil
	// means RedactPath. Logs always use RedactPath.
	Redact func(*url.URL) string
}

// Attempt is the outcome of one POST to one target.
type Attempt struct {
	// Outcome classifies the answer, or the failure to get one.
	Outcome channel.Outcome
	// Status is the answer's HTTP status; 0 when there was no answer.
	Status int
	// RetryAfter is the server's Retry-After on a Transient answer, capped
	// at MaxRetryAfter.
	RetryAfter time.Duration
	// Err describes a failure without the target's URL or address; nil on
	// Success.
	Err error
}

// Deliver posts msg to every target and answers target by target
// (Result.Targets[i] answers targets[i]): Success for a 2xx answer;
// Transient for 408, 429, 5xx, a network failure or a timeout, with that
// server's Retry-After; Permanent for any other answer. A target that is not
// an absolute http or https URL is Permanent and not posted to; the others
// still are. A target repeated in the list is posted once and answered
// alike at each place. Outcome, Error and RetryAfter sum the targets up
// (Transient when any target is, RetryAfter the largest of theirs). A
// request without targets is Permanent. No error text holds a URL.
func (c *Client) Deliver(ctx context.Context, targets []string, msg Message) channel.Result {
	if len(targets) == 0 {
		return channel.Fail(ErrNoTargets)
	}
	results := make([]channel.TargetResult, len(targets))
	slot := make([]int, len(targets)) // index in urls, or -1 for an invalid target
	urls := make([]*url.URL, 0, len(targets))
	seen := make(map[string]int, len(targets))
	for i, raw := range targets {
		u, err := ParseTarget(raw)
		if err != nil {
			slot[i] = -1
			results[i] = channel.TargetResult{Outcome: channel.Permanent, Error: err.Error()}
			continue
		}
		key := u.String()
		j, ok := seen[key]
		if !ok {
			j = len(urls)
			seen[key] = j
			urls = append(urls, u)
		}
		slot[i] = j
	}

	attempts := make([]Attempt, len(urls))
	if len(urls) == 1 {
		attempts[0] = c.Post(ctx, urls[0], msg)
	} else if len(urls) > 1 {
		slots := make(chan struct{}, maxTargetsInFlight)
		var wg sync.WaitGroup
		for i, u := range urls {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				attempts[i] = c.Post(ctx, u, msg)
			})
		}
		wg.Wait()
	}

	redact := msg.Redact
	if redact == nil {
		redact = RedactPath
	}
	var resolved []string
	for j, a := range attempts {
		if a.Outcome == channel.Success {
			resolved = append(resolved, redact(urls[j]))
		}
	}
	for i, j := range slot {
		if j >= 0 {
			results[i] = attempts[j].targetResult()
		}
	}
	res := channel.PerTarget(results)
	res.ResolvedTargets = resolved
	return res
}

// targetResult is the answer of one target from its attempt.
func (a Attempt) targetResult() channel.TargetResult {
	r := channel.TargetResult{Outcome: a.Outcome}
	if a.Outcome == channel.Success {
		return r
	}
	r.Error = "unknown error"
	if a.Err != nil {
		r.Error = a.Err.Error()
	}
	if a.Outcome == channel.Transient {
		r.RetryAfter = a.RetryAfter
	}
	return r
}

// Post makes one POST of msg to target and classifies it. It returns when
// the answer is read, the timeout passes or ctx ends, whichever is first.
func (c *Client) Post(ctx context.Context, target *url.URL, msg Message) Attempt {
	start := time.Now()
	a := c.post(ctx, target, msg)
	c.log(ctx, target, msg.ID, a, time.Since(start))
	return a
}

func (c *Client) post(ctx context.Context, target *url.URL, msg Message) Attempt {
	timeout := msg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	secrets := urlSecrets(target)
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, target.String(), bytes.NewReader(msg.Body))
	if err != nil {
		return Attempt{Outcome: channel.Permanent, Err: &safeError{
			msg:   "build the request: " + NetErrorText(err, secrets),
			cause: err,
		}}
	}
	for k, vs := range msg.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", UserAgent)
	}

	resp, err := c.client.Do(req)
	if err != nil {
		var denied *channel.DeniedError
		switch {
		case errors.As(err, &denied):
			// Before the context checks: a refusal is final even when the
			// attempt's time ran out meanwhile.
			return Attempt{Outcome: channel.Permanent, Err: &safeError{msg: "POST refused: " + denied.Error(), cause: err}}
		case ctx.Err() != nil:
			return Attempt{Outcome: channel.Transient, Err: fmt.Errorf("no answer before the attempt ended: %w", ctx.Err())}
		case pctx.Err() != nil:
			return Attempt{Outcome: channel.Transient, Err: fmt.Errorf("no answer within the timeout of %s: %w", timeout, pctx.Err())}
		}
		return Attempt{Outcome: channel.Transient, Err: describeNetError(err, secrets)}
	}
	defer func() {
		// Drain what is left (bounded) so that the connection can be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		_ = resp.Body.Close()
	}()

	a := Attempt{Outcome: Classify(resp.StatusCode), Status: resp.StatusCode}
	if a.Outcome == channel.Success {
		return a
	}
	if a.Outcome == channel.Transient {
		a.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	}
	text := "HTTP " + strconv.Itoa(resp.StatusCode)
	if st := http.StatusText(resp.StatusCode); st != "" {
		text += " " + st
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		text += " (redirects are not followed)"
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	if quoted := Sanitize(body, secrets...); quoted != "" {
		text += ": " + strconv.Quote(quoted)
	}
	a.Err = errors.New(text)
	return a
}

// log records one attempt, naming the target by scheme and host only.
func (c *Client) log(ctx context.Context, target *url.URL, id string, a Attempt, took time.Duration) {
	level := slog.LevelDebug
	if a.Outcome != channel.Success {
		level = slog.LevelInfo
	}
	if !c.logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("target", RedactPath(target)),
		slog.String("outcome", a.Outcome.String()),
		slog.Duration("took", took),
	}
	if id != "" {
		attrs = append(attrs, slog.String("id", id))
	}
	if a.Status != 0 {
		attrs = append(attrs, slog.Int("status", a.Status))
	}
	if a.RetryAfter > 0 {
		attrs = append(attrs, slog.Duration("retry_after", a.RetryAfter))
	}
	if a.Err != nil {
		attrs = append(attrs, slog.String("err", a.Err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "HTTP delivery attempt", attrs...)
}
