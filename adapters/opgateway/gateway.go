package opgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// Gateway implements ports.OpGateway over the systems and connections of
// a Config. It is safe for concurrent use; Close releases its connections.
type Gateway struct {
	systems map[string]*system
	conns   map[string]*sqlConn
	secrets secretref.Policy
	client  *http.Client
	own     []*http.Client // the systems' own clients
	logger  *slog.Logger
}

var _ ports.OpGateway = (*Gateway)(nil)

// system is a System ready for calls.
type system struct {
	System
	methods map[string]*method
	// client is the gateway's, or the system's own when it has a CAFile.
	client *http.Client
}

type method struct {
	Method
	tmpl template
	// body: the parameters that are not in the path go to a JSON body
	// (POST, PUT, PATCH), else to the query (GET, DELETE).
	body bool
}

// Options are the optional parts of a Gateway.
type Options struct {
	// Logger receives the log of failed attempts; nil discards it.
	Logger *slog.Logger
	// Transport, when set, carries the HTTP calls (tests); nil is a
	// transport of the gateway's own.
	Transport http.RoundTripper
}

// New returns the Gateway of cfg, with its zero fields taken as defaults,
// once it is valid: every rule of Validate, and every secret reference
// allowed by secrets (checked, not yet resolved: secrets are resolved at
// each call, a DSN when its pool opens). Its errors are *ports.FieldError,
// joined. It opens no connection. The site's configuration is the
// operator's, so the wiring passes secretref.Own(the configuration's
// directory) unless it narrows it.
func New(cfg Config, secrets secretref.Policy, opts Options) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := errors.Join(cfg.Validate(), cfg.CheckRefs(secrets)); err != nil {
		return nil, fmt.Errorf("opgateway: configuration: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		client:  newHTTPClient(opts.Transport, nil),
		systems: make(map[string]*system, len(cfg.Systems)),
		conns:   make(map[string]*sqlConn, len(cfg.Connections)),
		secrets: secrets,
		logger:  logger,
	}
	for i, s := range cfg.Systems {
		u, _ := url.Parse(s.BaseURL) // Validate parsed it
		s.BaseURL = strings.TrimSuffix(u.Scheme+"://"+u.Host+u.EscapedPath(), "/")
		sys := &system{System: s, methods: make(map[string]*method, len(s.Methods)), client: g.client}
		if s.CAFile != "" {
			roots, err := readCAFile(s.CAFile, secrets.Base)
			if err != nil {
				return nil, fmt.Errorf("opgateway: configuration: %w",
					&ports.FieldError{Field: fmt.Sprintf("Systems[%d].CAFile", i), Msg: err.Error()})
			}
			sys.client = newHTTPClient(opts.Transport, roots)
			g.own = append(g.own, sys.client)
		}
		for _, m := range s.Methods {
			t, _ := parseTemplate(m.Path) // Validate parsed it
			sys.methods[m.Name] = &method{Method: m, tmpl: t,
				body: m.Verb != http.MethodGet && m.Verb != http.MethodDelete}
		}
		g.systems[s.Name] = sys
	}
	for _, c := range cfg.Connections {
		g.conns[c.Name] = &sqlConn{Connection: c}
	}
	return g, nil
}

// Close closes the database pools and the idle HTTP connections. Attempts
// made after it open them again.
func (g *Gateway) Close() error {
	g.client.CloseIdleConnections()
	for _, c := range g.own {
		c.CloseIdleConnections()
	}
	var errs []error
	for _, c := range g.conns {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

// Check validates op before anything is committed: a call's system and
// method are defined, its Params are a JSON object (at most
// MaxParamsBytes, valid UTF-8, each name once) that supplies every path
// parameter with a scalar, and whose other members fit the query when the
// verb is GET or DELETE; a write's connection is defined, its SQL is
// non-empty valid UTF-8 without NUL of at most MaxSQLBytes, and its Args a
// JSON array of scalars (MaxArgs, MaxArgsBytes), and in exactly-once mode
// its id fits MarkerTable (64 bytes). Errors wrap
// ports.ErrInvalid and never quote a parameter's value.
func (g *Gateway) Check(op ports.Operation) error {
	var err error
	switch op.Kind {
	case ports.OpCall:
		var m *method
		if m, err = g.method(op.Target, op.Method); err == nil {
			_, err = m.build(op.Payload.Params)
		}
	case ports.OpWrite:
		var c *sqlConn
		if c, err = g.conn(op.Target); err == nil {
			_, err = checkWrite(op.Payload.SQL, op.Payload.Args)
		}
		if err == nil && c.ExactlyOnce && len(op.ID) > maxMarkerID {
			err = fmt.Errorf("the operation id is over %d bytes, the longest %s records", maxMarkerID, MarkerTable)
		}
	default:
		err = fmt.Errorf("unknown operation kind %q", op.Kind)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ports.ErrInvalid):
		return fmt.Errorf("opgateway: %w", err)
	}
	return fmt.Errorf("opgateway: %s: %w", err.Error(), ports.ErrInvalid)
}

// Policy returns the retry policy of the system (OpCall) or connection
// (OpWrite) named target, or an error wrapping ports.ErrInvalid when the
// configuration has none.
func (g *Gateway) Policy(kind ports.OpKind, target string) (ports.OpPolicy, error) {
	switch kind {
	case ports.OpCall:
		s, ok := g.systems[target]
		if !ok {
			break
		}
		return ports.OpPolicy{MaxRetries: s.MaxRetries, Interval: s.RetryInterval}, nil
	case ports.OpWrite:
		c, ok := g.conns[target]
		if !ok {
			break
		}
		return ports.OpPolicy{MaxRetries: c.MaxRetries, Interval: c.RetryInterval}, nil
	}
	return ports.OpPolicy{}, fmt.Errorf("opgateway: policy: %w", unknownTarget(kind, target))
}

// Attempt makes one attempt of op and classifies it (see the package
// documentation). An operation whose target the configuration no longer
// defines is Transient: the operator may define it again, and until then
// the operation parks instead of failing.
func (g *Gateway) Attempt(ctx context.Context, op ports.Operation) ports.OpResult {
	var res ports.OpResult
	switch op.Kind {
	case ports.OpCall:
		m, err := g.method(op.Target, op.Method)
		if err != nil {
			return ports.OpResult{Outcome: ports.OutcomeTransient, Error: err.Error()}
		}
		res = g.call(ctx, g.systems[op.Target], m, op)
	case ports.OpWrite:
		c, err := g.conn(op.Target)
		if err != nil {
			return ports.OpResult{Outcome: ports.OutcomeTransient, Error: err.Error()}
		}
		res = c.write(ctx, g.secrets, op)
	default:
		return ports.OpResult{Outcome: ports.OutcomePermanent, Error: fmt.Sprintf("unknown operation kind %q", op.Kind)}
	}
	if res.Outcome != ports.OutcomeSuccess {
		// A transient failure is what a target that is down answers to
		// every call and every retry: at Debug, or the log would grow by
		// a line per call for as long as it is down (the core warns when
		// an operation parks). A permanent one is the script's, once.
		level := slog.LevelDebug
		if res.Outcome == ports.OutcomePermanent {
			level = slog.LevelInfo
		}
		g.logger.LogAttrs(ctx, level, "cached operation attempt failed",
			slog.String("id", op.ID), slog.String("kind", string(op.Kind)), slog.String("target", op.Summary()),
			slog.String("outcome", string(res.Outcome)), slog.Duration("retry_after", res.RetryAfter),
			slog.String("err", res.Error))
	}
	return res
}

func (g *Gateway) method(sys, name string) (*method, error) {
	s, ok := g.systems[sys]
	if !ok {
		return nil, unknownTarget(ports.OpCall, sys)
	}
	m, ok := s.methods[name]
	if !ok {
		return nil, fmt.Errorf("system %s has no method %s", quoteName(sys), quoteName(name))
	}
	return m, nil
}

func (g *Gateway) conn(name string) (*sqlConn, error) {
	c, ok := g.conns[name]
	if !ok {
		return nil, unknownTarget(ports.OpWrite, name)
	}
	return c, nil
}

func unknownTarget(kind ports.OpKind, target string) error {
	what := "external system"
	if kind == ports.OpWrite {
		what = "database connection"
	} else if kind != ports.OpCall {
		return fmt.Errorf("unknown operation kind %q: %w", kind, ports.ErrInvalid)
	}
	return fmt.Errorf("no %s %s in the site's configuration: %w", what, quoteName(target), ports.ErrInvalid)
}

// quoteName quotes a name a caller gave, cut to MaxNameBytes so that an
// error stays short.
func quoteName(s string) string {
	if len(s) > MaxNameBytes {
		s = strings.ToValidUTF8(s[:MaxNameBytes], "") + "…"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return fmt.Sprintf("%q", s)
}
