package email

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wneessen/go-mail"
	gmsmtp "github.com/wneessen/go-mail/smtp"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

const (
	// maxIdle is how long an idle connection is kept. Servers drop idle
	// clients after a while (Postfix after 300 s); one idle for longer is
	// closed, by the pool's idle timer or by the next acquire, instead of
	// risking a failure. It is also what lets the pool shrink: the idle
	// connections are reused most recently used first, so the ones a
	// lighter load no longer needs stay idle and are closed.
	maxIdle = 30 * time.Second
	// quitTimeout bounds the polite QUIT when a healthy connection is closed.
	quitTimeout = time.Second
)

// smtpConn is one connection to an SMTP server, greeted, secured and
// authenticated, ready for MAIL FROM.
type smtpConn struct {
	sc       *gmsmtp.Client
	dc       *deadlineConn
	lastUsed time.Time
	reused   bool // it sent a message before this one
}

// close closes the connection. A graceful close says QUIT first.
func (cn *smtpConn) close(graceful bool) {
	if cn.sc == nil {
		if cn.dc != nil {
			_ = cn.dc.Close()
		}
		return
	}
	if graceful {
		_ = cn.dc.SetDeadline(time.Now().Add(quitTimeout))
		if err := cn.sc.Quit(); err == nil {
			return
		}
	}
	_ = cn.sc.Close()
}

// pool holds the connections of one set of connection settings: at most
// poolSize open at once, the idle ones kept for the next message. It grows
// with the deliveries waiting: a delivery that finds no idle connection
// opens one while fewer than poolSize are open. It shrinks when the load
// does: a connection idle for maxIdle is closed by the pool's idle timer,
// so a quiet channel keeps none open.
type pool struct {
	key    poolKey
	cfg    *config // the settings it was made for, secrets included
	tls    *tls.Config
	tokens *tokenSource // xoauth2 only
	policy *channel.NetworkPolicy
	logger *slog.Logger

	slots   chan struct{} // one token per open connection
	maxIdle time.Duration // how long an idle connection is kept

	mu      sync.Mutex
	idle    []*smtpConn    // the most recently used last
	reaper  *time.Timer    // closes the idle connections past maxIdle; nil when none is armed
	reaping sync.WaitGroup // a reap closing connections; added to under mu while not retired
	retired bool           // replaced or closed: connections are closed when released
}

// newPool returns an empty pool for cfg. It reads the tls_ca_file.
func newPool(cfg *config, key poolKey, tokens *tokenSource, policy *channel.NetworkPolicy, logger *slog.Logger) (*pool, error) {
	p := &pool{
		key:     key,
		cfg:     cfg,
		tokens:  tokens,
		policy:  policy,
		logger:  logger,
		slots:   make(chan struct{}, cfg.poolSize),
		maxIdle: maxIdle,
	}
	if cfg.tls != tlsNone {
		p.tls = &tls.Config{
			ServerName:         cfg.serverName,
			MinVersion:         tls.VersionTLS12,
			ClientSessionCache: tls.NewLRUClientSessionCache(cfg.poolSize),
		}
		if cfg.caFile != "" {
			pem, err := os.ReadFile(cfg.caFile)
			if err != nil {
				return nil, permanent(fmt.Errorf("setting %q: cannot read the file: %w", settingTLSCAFile, errSettings))
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return nil, permanent(fmt.Errorf("setting %q: the file holds no PEM certificate: %w", settingTLSCAFile, errSettings))
			}
			p.tls.RootCAs = roots
		}
	}
	return p, nil
}

// send sends msg from the envelope sender from to the envelope recipients
// rcpts (each "<address>") over a pooled connection, in one transaction.
// refused[i] is recipient i's refusal (the server's reply to its RCPT TO),
// nil when the server accepted it; err is a failure of the transaction as
// a whole (no connection, MAIL FROM or DATA refused, the connection lost),
// which applies to every recipient not refused. When a reused connection
// turns out to have been closed by the server before it accepted anything
// (MAIL FROM failed without a reply, or with 421), it is dropped and the
// message goes over the next idle connection, or a new one.
func (p *pool) send(ctx context.Context, from string, rcpts []string, msg *mail.Msg) ([]error, error) {
	for {
		cn, err := p.acquire(ctx)
		if err != nil {
			return nil, err
		}
		unbind := cn.dc.bind(ctx, p.cfg.connectTimeout)
		refused, stale, err := transact(cn.sc, from, rcpts, msg)
		unbind()
		p.release(cn, err == nil && ended(ctx) == nil)
		if err != nil && stale && cn.reused && ended(ctx) == nil {
			p.logger.LogAttrs(ctx, slog.LevelDebug, "email: pooled SMTP connection was closed by the server, reconnecting")
			continue
		}
		return refused, err
	}
}

// transact runs one mail transaction on sc: MAIL FROM, one RCPT TO per
// recipient, each refusal kept, then DATA with msg when the server accepted
// any recipient, or RSET when it accepted none. It returns what send
// returns, and stale: the transaction failed before the server accepted
// anything, as it does on a connection the server has closed.
//
// It does what go-mail's Client.SendWithSMTPClient does, less its abort on
// the first refused recipient: sc adds BODY=8BITMIME and SMTPUTF8 to MAIL
// FROM when the server offers them; DSN is not requested; the message is
// quoted-printable, so it needs no 8BITMIME. No NOOP before and no RSET
// after a delivered message: the connection is known good (it just sent a
// message), a new MAIL FROM starts a new transaction, and a connection the
// server closed meanwhile is replaced (send).
func transact(sc *gmsmtp.Client, from string, rcpts []string, msg *mail.Msg) (refused []error, stale bool, err error) {
	if !sc.HasConnection() {
		return nil, true, errors.New("the pooled connection is closed")
	}
	if err := sc.Mail(from); err != nil {
		var te *textproto.Error
		stale = !errors.As(err, &te) || te.Code == 421
		return nil, stale, fmt.Errorf("MAIL FROM: %w", err)
	}
	refused = make([]error, len(rcpts))
	accepted := 0
	for i, rcpt := range rcpts {
		err := sc.Rcpt(rcpt)
		if err == nil {
			accepted++
			continue
		}
		var te *textproto.Error
		if !errors.As(err, &te) {
			// No reply: the connection failed, and the transaction with it.
			return refused, false, fmt.Errorf("RCPT TO: %w", err)
		}
		refused[i] = fmt.Errorf("recipient refused: %w", err)
	}
	if accepted == 0 {
		if err := sc.Reset(); err != nil {
			return refused, false, fmt.Errorf("RSET after every recipient was refused: %w", err)
		}
		return refused, false, nil
	}
	w, err := sc.Data()
	if err != nil {
		return refused, false, fmt.Errorf("DATA: %w", err)
	}
	if _, err := msg.WriteTo(w); err != nil {
		return refused, false, fmt.Errorf("writing the message: %w", err)
	}
	if err := w.Close(); err != nil {
		return refused, false, fmt.Errorf("end of DATA: %w", err)
	}
	return refused, false, nil
}

// acquire returns an idle connection, or a new one when none is idle, once
// fewer than poolSize connections are in use.
func (p *pool) acquire(ctx context.Context) (*smtpConn, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free SMTP connection: %w", ctx.Err())
	}
	now := time.Now()
	var stale []*smtpConn
	p.mu.Lock()
	for len(p.idle) > 0 {
		cn := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(cn.lastUsed) < p.maxIdle {
			p.mu.Unlock()
			for _, s := range stale {
				s.close(false)
			}
			cn.reused = true
			return cn, nil
		}
		stale = append(stale, cn)
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.close(false)
	}

	cn, err := p.dial(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return cn, nil
}

// release gives back a connection acquired from the pool. A healthy one is
// kept for the next message unless the pool is retired; any other is closed.
func (p *pool) release(cn *smtpConn, healthy bool) {
	defer func() { <-p.slots }()
	p.mu.Lock()
	cn.lastUsed = time.Now() // under the lock: idle stays in the order of lastUsed
	if healthy && !p.retired {
		p.idle = append(p.idle, cn)
		if p.reaper == nil {
			p.reaper = time.AfterFunc(p.maxIdle, p.reap)
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	cn.close(healthy)
}

// reap is the idle timer's work: it closes, politely, the idle connections
// unused for maxIdle, and arms the timer again for the oldest one left.
func (p *pool) reap() {
	now := time.Now()
	p.mu.Lock()
	p.reaper = nil
	if p.retired {
		p.mu.Unlock()
		return
	}
	// idle is in the order of release: the least recently used first.
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].lastUsed) >= p.maxIdle {
		n++
	}
	expired := slices.Clone(p.idle[:n])
	p.idle = slices.Delete(p.idle, 0, n)
	left := len(p.idle)
	if left > 0 {
		p.reaper = time.AfterFunc(p.idle[0].lastUsed.Add(p.maxIdle).Sub(now), p.reap)
	}
	if len(expired) == 0 {
		p.mu.Unlock()
		return
	}
	p.reaping.Add(1) // under mu, before retire can see the pool unretired: retire waits for it
	p.mu.Unlock()
	defer p.reaping.Done()
	closeAll(expired)
	p.logger.LogAttrs(context.Background(), slog.LevelDebug, "email: idle SMTP connections closed",
		slog.Int("closed", len(expired)), slog.Int("idle", left))
}

// closeAll closes the connections politely, at once.
func closeAll(conns []*smtpConn) {
	var wg sync.WaitGroup
	for _, cn := range conns {
		wg.Go(func() { cn.close(true) })
	}
	wg.Wait()
}

// retire closes the idle connections, politely and at once, stops the idle
// timer, waits for a reap already closing connections (each QUIT bounded by
// quitTimeout), and makes release close the connections still in use.
func (p *pool) retire() {
	p.mu.Lock()
	p.retired = true
	idle := p.idle
	p.idle = nil
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
	p.mu.Unlock()
	closeAll(idle)
	p.reaping.Wait()
}

// dial opens, secures and authenticates a new connection. Its deadlines
// follow ctx and connect_timeout.
func (p *pool) dial(ctx context.Context) (*smtpConn, error) {
	var token string
	if p.tokens != nil {
		t, err := p.tokens.token(ctx)
		if err != nil {
			return nil, err
		}
		token = t
	}

	cn := &smtpConn{}
	var (
		unbind func()
		denied *channel.DeniedError // the policy refused the connection
	)
	addr := net.JoinHostPort(p.cfg.host, strconv.Itoa(p.cfg.port))
	dial := func(dialCtx context.Context, _, _ string) (net.Conn, error) {
		d := net.Dialer{Control: p.policy.Control}
		raw, err := d.DialContext(dialCtx, "tcp", addr)
		if err != nil {
			_ = errors.As(err, &denied) // go-mail may not wrap the error it returns
			return nil, err
		}
		cn.dc = &deadlineConn{Conn: raw}
		unbind = cn.dc.bind(ctx, p.cfg.connectTimeout)
		if p.cfg.tls != tlsImplicit {
			return cn.dc, nil
		}
		tc := tls.Client(cn.dc, p.tls)
		if err := tc.HandshakeContext(dialCtx); err != nil {
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		return tc, nil
	}

	// go-mail's debug log stays off: it would write the SMTP dialogue,
	// addresses included.
	opts := []mail.Option{
		mail.WithPort(p.cfg.port),
		mail.WithTimeout(p.cfg.connectTimeout),
		mail.WithDialContextFunc(dial),
	}
	switch p.cfg.tls {
	case tlsNone:
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	case tlsStartTLS:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory), mail.WithTLSConfig(p.tls))
	case tlsImplicit:
		opts = append(opts, mail.WithSSL(), mail.WithTLSConfig(p.tls))
	}
	switch p.cfg.auth {
	case authPlain:
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain),
			mail.WithUsername(p.cfg.username), mail.WithPassword(p.cfg.password))
	case authLogin:
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthLogin),
			mail.WithUsername(p.cfg.username), mail.WithPassword(p.cfg.password))
	case authXOAUTH2:
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthXOAUTH2),
			mail.WithUsername(p.cfg.username), mail.WithPassword(token))
	}
	mc, err := mail.NewClient(p.cfg.host, opts...)
	if err != nil {
		return nil, fmt.Errorf("setting up the SMTP client: %w", err)
	}
	sc, err := mc.DialToSMTPClientWithContext(ctx)
	if unbind != nil {
		unbind()
	}
	if err != nil {
		if cn.dc != nil {
			_ = cn.dc.Close()
		}
		if denied != nil {
			// Permanent, and named by its address alone.
			return nil, permanent(fmt.Errorf("connecting to the SMTP server: %w", denied))
		}
		var te *textproto.Error
		if token != "" && errors.As(err, &te) && te.Code == 535 {
			p.tokens.forget(token) // revoked, say: the next connection fetches a new one
		}
		return nil, fmt.Errorf("connecting to the SMTP server: %w", err)
	}
	cn.sc = sc
	p.logger.LogAttrs(ctx, slog.LevelDebug, "email: SMTP connection opened",
		slog.String("host", p.cfg.host), slog.Int("port", p.cfg.port), slog.String("tls", p.cfg.tls))
	return cn, nil
}
