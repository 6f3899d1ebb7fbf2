// Package email is the built-in email channel: it delivers a notification as
// one plain-text message through an SMTP server, with github.com/wneessen/go-mail.
//
// The list's targets are e-mail addresses. They all receive the same message
// as blind copies: they are the envelope recipients (RCPT TO) and appear in
// no header; the To header is "undisclosed-recipients:;". The message's
// Message-ID is derived from the notification id, so it is the same on every
// attempt.
//
// Each target is answered on its own (Result.Targets). One transaction
// carries the message: MAIL FROM, one RCPT TO per distinct address, then
// DATA once, to the recipients the server accepted (none accepted: no DATA).
// A recipient the server refuses does not hold back the others: its target
// is Permanent on a 5xx reply and Transient on a 4xx one, with the reply in
// its error. The targets the server accepted are Success once DATA is
// accepted; a failure of the connection, of MAIL FROM or of DATA is the
// outcome of every target not refused (5xx Permanent; 4xx, a network error
// or a timeout Transient). A target that is not an e-mail address is
// Permanent, and the others are still sent. Central then retries only the
// targets that failed, so no recipient gets the message twice because
// another was refused.
//
// Connections are pooled per set of connection settings and reused from
// message to message. The pool opens a connection when a delivery finds none
// idle, up to pool_size (default 16), and closes one left idle for 30 s, so
// it grows with the deliveries waiting and shrinks back when they stop. A
// change of the settings starts a new pool and closes the old one's
// connections.
//
// Errors and logs never hold a secret setting, an OAuth2 token or an e-mail
// address: addresses in SMTP replies are masked (b***@example.com).
package email

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	netmail "net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wneessen/go-mail"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// Name is the notification type the channel delivers.
const Name = "email"

// Version is the channel's version, as Describe reports it.
const Version = "1.0.0"

// maxTokenSources bounds the cache of OAuth2 token sources; it is emptied
// when full (settings changed that often).
const maxTokenSources = 16

var (
	_ channel.Channel   = (*Channel)(nil)
	_ channel.Describer = (*Channel)(nil)
)

// Channel is the email channel. It is safe for concurrent use. Close it to
// close its pooled connections.
type Channel struct {
	logger *slog.Logger
	now    func() time.Time       // the clock of token expiry; tests move it
	http   *http.Client           // for the OAuth2 token endpoint
	policy *channel.NetworkPolicy // every connection obeys it

	current atomic.Pointer[pool] // the pool of the latest settings
	maxIdle time.Duration        // how long a pool keeps an idle connection; 0: maxIdle (tests shorten it)

	mu     sync.Mutex // serializes pool changes; guards tokens
	tokens map[[sha256.Size]byte]*tokenSource
}

// Option changes how New builds a Channel.
type Option func(*Channel)

// WithNetworkPolicy makes the channel connect under policy instead of the
// one central passed to the process (channel.NetworkPolicyFromEnv).
func WithNetworkPolicy(policy *channel.NetworkPolicy) Option {
	return func(c *Channel) { c.policy = policy }
}

// New returns an email channel that logs to logger; a nil logger discards.
// Its connections, to the SMTP server and to the OAuth2 token endpoint, obey
// the delivery network policy central passed to the process, checked at
// connect time on the address actually dialled; a refused connection is a
// Permanent failure.
func New(logger *slog.Logger, opts ...Option) *Channel {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Channel{
		logger: logger,
		now:    time.Now,
		tokens: make(map[[sha256.Size]byte]*tokenSource),
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.policy == nil {
		c.policy = channel.NetworkPolicyFromEnv()
	}
	if err := c.policy.Err(); err != nil {
		logger.Error("email: the delivery network policy is malformed: every delivery will be refused", "err", err)
	}
	// A redirect of the token endpoint connects through the same policy.
	c.http = &http.Client{Transport: c.policy.Transport()}
	return c
}

// Describe returns the channel's name, version and settings schema.
func (c *Channel) Describe(context.Context) (channel.Description, error) {
	settings := make([]channel.Setting, len(schema))
	for i, s := range schema {
		s.Allowed = append([]string(nil), s.Allowed...)
		settings[i] = s
	}
	return channel.Description{Name: Name, Version: Version, Settings: settings}, nil
}

// Close closes the pooled connections, saying QUIT on the idle ones and
// closing the busy ones when their delivery ends. The channel stays usable:
// a later Deliver opens new connections. It always returns nil.
func (c *Channel) Close() error {
	c.mu.Lock()
	old := c.current.Swap(nil)
	c.mu.Unlock()
	if old != nil {
		old.retire()
	}
	c.http.CloseIdleConnections()
	return nil
}

// Deliver sends the notification to its targets as one message and answers
// for each target (Result.Targets[i] answers req.Targets[i]). See the
// package documentation for the outcomes, and Describe for the settings.
func (c *Channel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	id := req.Notification.ID
	cfg, err := parseSettings(req.Settings)
	if err != nil {
		return c.failure(ctx, id, &masker{}, permanent(err))
	}
	if len(req.Targets) == 0 {
		return c.failure(ctx, id, &masker{}, errNoTargets)
	}
	m := &masker{secrets: cfg.secrets()}
	for _, t := range req.Targets {
		m.addresses = append(m.addresses, strings.TrimSpace(t))
	}
	rcpts := parseTargets(req.Targets)
	for _, a := range rcpts.addrs {
		m.addresses = append(m.addresses, a.Address)
	}
	var (
		refused []error // per address: its RCPT refusal
		txErr   error   // the transaction's failure
	)
	switch {
	case len(rcpts.addrs) == 0:
		// Nothing to send: every target is invalid.
	case ctx.Err() != nil:
		txErr = fmt.Errorf("before sending: %w", ctx.Err())
	default:
		p, err := c.poolFor(cfg)
		if err != nil {
			txErr = err
			break
		}
		envelope := make([]string, len(rcpts.addrs))
		for i, a := range rcpts.addrs {
			envelope[i] = a.String()
		}
		refused, txErr = p.send(ctx, cfg.from.Address, envelope, newMessage(cfg, req.Notification))
		if p.tokens != nil {
			m = m.withSecret(p.tokens.current())
		}
	}
	return c.results(ctx, id, m, rcpts, refused, txErr)
}

// results answers each target of a delivery: an invalid address is
// Permanent; a refused recipient has the outcome of the server's reply (5xx
// Permanent, 4xx Transient); the others share the outcome of the
// transaction, err (Success when nil). Once ctx has ended, a failure of the
// transaction is Transient whatever the error. Error texts are masked.
func (c *Channel) results(ctx context.Context, id string, m *masker, rcpts recipients, refused []error, err error) channel.Result {
	shared := channel.TargetResult{Outcome: channel.Success}
	if err != nil {
		shared = c.classified(ctx, m, err)
	}
	rs := make([]channel.TargetResult, len(rcpts.of))
	delivered := make([]bool, len(rcpts.addrs))
	for i, j := range rcpts.of {
		switch {
		case j < 0:
			rs[i] = channel.TargetResult{Outcome: channel.Permanent, Error: errInvalidTarget.Error()}
		case j < len(refused) && refused[j] != nil:
			rs[i] = channel.TargetResult{Outcome: classify(refused[j]), Error: m.mask(refused[j].Error())}
		default:
			rs[i] = shared
			delivered[j] = err == nil
		}
	}
	res := channel.PerTarget(rs)
	for j, a := range rcpts.addrs {
		if delivered[j] {
			res.ResolvedTargets = append(res.ResolvedTargets, a.Address)
		}
	}
	if res.Outcome != channel.Success {
		c.logger.LogAttrs(ctx, slog.LevelDebug, "email: delivery failed",
			slog.String("notification", id), slog.String("outcome", res.Outcome.String()), slog.String("err", res.Error))
	}
	return res
}

// failure is the Result of a delivery that failed before any target was
// tried, the same for every target, with a masked Error; it is logged.
func (c *Channel) failure(ctx context.Context, id string, m *masker, err error) channel.Result {
	r := c.classified(ctx, m, err)
	c.logger.LogAttrs(ctx, slog.LevelDebug, "email: delivery failed",
		slog.String("notification", id), slog.String("outcome", r.Outcome.String()), slog.String("err", r.Error))
	return channel.Result{Outcome: r.Outcome, Error: r.Error}
}

// classified classifies err into a failed TargetResult whose Error is
// masked. Once ctx has ended, it is Transient whatever the error.
func (c *Channel) classified(ctx context.Context, m *masker, err error) channel.TargetResult {
	outcome := classify(err)
	text := err.Error()
	if ctxErr := ended(ctx); ctxErr != nil {
		outcome = channel.Transient
		if !errors.Is(err, ctxErr) {
			text += " (" + ctxErr.Error() + ")"
		}
	}
	return channel.TargetResult{Outcome: outcome, Error: m.mask(text)}
}

// ended returns ctx's error, or context.DeadlineExceeded once its deadline
// has passed: a network timeout set to the deadline may fire a moment
// before the context notices.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// poolFor returns the pool of cfg's connection settings, replacing the
// current pool when they changed; the replaced pool's idle connections are
// closed.
func (c *Channel) poolFor(cfg *config) (*pool, error) {
	key := cfg.key()
	if p := c.current.Load(); p != nil && p.key == key {
		return p, nil
	}
	c.mu.Lock()
	if p := c.current.Load(); p != nil && p.key == key {
		c.mu.Unlock()
		return p, nil
	}
	var tokens *tokenSource
	if cfg.auth == authXOAUTH2 {
		tokens = c.tokenSourceLocked(cfg)
	}
	p, err := newPool(cfg, key, tokens, c.policy, c.logger)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.maxIdle > 0 {
		p.maxIdle = c.maxIdle
	}
	old := c.current.Swap(p)
	c.mu.Unlock()

	c.logger.LogAttrs(context.Background(), slog.LevelInfo, "email: new SMTP connection pool",
		slog.String("host", cfg.host), slog.Int("port", cfg.port), slog.String("tls", cfg.tls),
		slog.String("auth", cfg.auth), slog.Int("pool_size", cfg.poolSize), slog.Bool("replaced", old != nil))
	if old != nil {
		old.retire()
	}
	return p, nil
}

// tokenSourceLocked returns the token source of cfg's OAuth2 client, the
// same one as long as the client's settings stay the same. c.mu is held.
func (c *Channel) tokenSourceLocked(cfg *config) *tokenSource {
	key := cfg.tokenKey()
	if ts, ok := c.tokens[key]; ok {
		return ts
	}
	if len(c.tokens) >= maxTokenSources {
		clear(c.tokens)
	}
	ts := newTokenSource(cfg, c.http, func() time.Time { return c.now() })
	c.tokens[key] = ts
	return ts
}

// errNoTargets is the error of a request without targets.
var errNoTargets = permanent(errors.New("no targets: the list resolved to no e-mail address"))

// errInvalidTarget is the error of a target that is not an e-mail address.
var errInvalidTarget = errors.New("not a valid e-mail address")

// recipients are the valid addresses of a list's targets, without display
// names and duplicates, in the list's order.
type recipients struct {
	addrs []*netmail.Address
	// of maps each target to its address in addrs, or to -1 when the
	// target is not a valid e-mail address.
	of []int
}

// parseTargets parses the targets.
func parseTargets(targets []string) recipients {
	r := recipients{
		addrs: make([]*netmail.Address, 0, len(targets)),
		of:    make([]int, len(targets)),
	}
	seen := make(map[string]int, len(targets))
	for i, t := range targets {
		a, err := netmail.ParseAddress(strings.TrimSpace(t))
		if err != nil || a.Address == "" {
			r.of[i] = -1
			continue
		}
		j, ok := seen[a.Address]
		if !ok {
			j = len(r.addrs)
			seen[a.Address] = j
			r.addrs = append(r.addrs, &netmail.Address{Address: a.Address})
		}
		r.of[i] = j
	}
	return r
}

// oneLine maps line breaks and other control characters to spaces, for a
// header.
func oneLine(r rune) rune {
	if r < ' ' || r == 0x7f {
		return ' '
	}
	return r
}

// messageIDPart tells whether a notification id may make the local part
// of the Message-ID: letters, digits, '.', '_' and '-', at most 128.
func messageIDPart(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// newMessage builds the message of one notification. Its recipients are in
// the envelope only (pool.send): the message names none of them.
func newMessage(cfg *config, n channel.Notification) *mail.Msg {
	msg := mail.NewMsg(mail.WithNoDefaultUserAgent())
	msg.FromMailAddress(cfg.from)
	msg.SetGenHeaderPreformatted(mail.Header("To"), "undisclosed-recipients:;")
	msg.SetGenHeader(mail.Header("Auto-Submitted"), "auto-generated")
	msg.SetUserAgent("siteline-outbox-email/" + Version)
	msg.Subject(strings.Map(oneLine, n.Subject))
	if messageIDPart(n.ID) {
		domain := cfg.from.Address[strings.LastIndexByte(cfg.from.Address, '@')+1:]
		msg.SetMessageIDWithValue(n.ID + "@" + domain)
	}
	msg.SetBodyString(mail.TypeTextPlain, n.Body)
	return msg
}
