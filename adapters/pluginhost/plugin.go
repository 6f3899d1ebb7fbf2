package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/time/rate"

	"github.com/siteline/outbox/adapters/hclogslog"
	"github.com/siteline/outbox/adapters/secretref"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
)

// plugin is one channel plugin: its configuration, its current process and
// the bounds of the deliveries through it. It implements ports.Channel.
type plugin struct {
	cfg  Plugin
	host *Config
	log  *slog.Logger

	slots   chan struct{} // MaxConcurrency deliveries in flight
	limiter *rate.Limiter
	suspect chan struct{} // a call failed: check the process now

	mu   sync.Mutex
	inst *instance     // nil while down
	up   chan struct{} // closed while inst is set
	desc channel.Description
	// secret names the settings to resolve (those desc marks secret); nil
	// when desc has no schema, and no setting is resolved.
	secret   map[string]bool
	restarts int
}

// instance is one running plugin process.
type instance struct {
	client  *goplugin.Client
	ch      *channel.Client
	pid     int
	started time.Time
}

var _ ports.Channel = (*plugin)(nil)

func newPlugin(cfg Plugin, host *Config, log *slog.Logger) *plugin {
	return &plugin{
		cfg: cfg, host: host, log: log,
		slots:   make(chan struct{}, cfg.MaxConcurrency),
		limiter: rate.NewLimiter(rate.Inf, 1),
		suspect: make(chan struct{}, 1),
		up:      make(chan struct{}),
		desc:    channel.Description{Name: cfg.Type},
	}
}

// Deliver implements ports.Channel: it resolves the delivery's secret
// references (the targets and the settings the schema marks secret) under
// the host's policy, waits for a free slot, the rate limit and a running process
// (all within ctx), and makes the delivery. A delivery the process was
// making when it died is Transient: it may or may not have happened. When
// there was no room (no slot or rate-limit token in time, no process) the
// result is NotAttempted, so that the row goes back untouched.
func (p *plugin) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	p.mu.Lock()
	secret := p.secret
	p.mu.Unlock()
	settings, targets, err := resolveDelivery(p.host.Secrets, secret, d.Settings, d.Targets)
	if errors.Is(err, secretref.ErrUnresolvable) || errors.Is(err, secretref.ErrNotAllowed) {
		return ports.Result{Outcome: ports.OutcomePermanent, Error: err.Error()}
	}
	if err != nil {
		return ports.Result{Outcome: ports.OutcomeTransient, Error: err.Error()}
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-ctx.Done():
		return notAttempted("no free delivery slot before the deadline", 0)
	}
	if res, ok := p.reserve(ctx, d.RateLimit); !ok {
		return res
	}
	n := d.Notification
	req := channel.Request{
		Notification: channel.Notification{
			ID: n.ID, List: n.List, Subject: n.Subject, Body: n.Body, TypeData: n.TypeData,
			Priority: n.Priority, SourceSite: n.SourceSite, CreatedAt: n.CreatedAt, Attempt: n.RetryCount + 1,
		},
		Targets:  targets,
		Settings: settings,
	}
	for {
		inst, err := p.running(ctx)
		if err != nil {
			return notAttempted("channel plugin not running (restarting)", time.Second)
		}
		res, sent := inst.ch.Send(ctx, req)
		if !sent {
			if ctx.Err() == nil {
				// The process was replaced between running and Send:
				// the delivery never left; use the next process.
				p.setDown(inst)
				continue
			}
			return notAttempted("no room in the channel plugin before the deadline", 0)
		}
		// res.ResolvedTargets is the plugin's word and is dropped: central
		// records the list's targets as written (core's dispatcher).
		out := ports.Result{Error: res.Error, RetryAfter: res.RetryAfter}
		switch res.Outcome {
		case channel.Success:
			out.Outcome = ports.OutcomeSuccess
		case channel.Permanent:
			out.Outcome = ports.OutcomePermanent
		default:
			out.Outcome = ports.OutcomeTransient
		}
		return out
	}
}

// notAttempted is the result of a delivery that was never handed to the
// plugin.
func notAttempted(why string, retryAfter time.Duration) ports.Result {
	return ports.Result{Outcome: ports.OutcomeTransient, Error: why, NotAttempted: true, RetryAfter: retryAfter}
}

// reserve takes a token of the channel's rate limit, following a change of
// the limit, and waits for it. When the token would come later than half the
// time left before ctx's deadline, it takes none and answers NotAttempted
// with the wait as RetryAfter: the delivery would have little time left.
func (p *plugin) reserve(ctx context.Context, perSecond float64) (ports.Result, bool) {
	limit := rate.Inf
	if perSecond > 0 {
		limit = rate.Limit(perSecond)
	}
	if p.limiter.Limit() != limit {
		p.limiter.SetLimit(limit)
		p.limiter.SetBurst(max(1, int(perSecond)))
	}
	r := p.limiter.Reserve()
	delay := r.Delay()
	if delay <= 0 {
		return ports.Result{}, true
	}
	why := fmt.Sprintf("rate limit of %g deliveries/s: no room before the deadline", perSecond)
	if deadline, ok := ctx.Deadline(); ok && delay > time.Until(deadline)/2 {
		r.Cancel()
		return notAttempted(why, delay), false
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return ports.Result{}, true
	case <-ctx.Done():
		r.Cancel()
		return notAttempted(why, delay), false
	}
}

// running returns the running process, waiting for a restart within ctx.
func (p *plugin) running(ctx context.Context) (*instance, error) {
	for {
		p.mu.Lock()
		inst, up := p.inst, p.up
		p.mu.Unlock()
		if inst != nil && !inst.client.Exited() {
			return inst, nil
		}
		if inst != nil {
			// Dead, and the supervisor has not noticed yet: wait for the
			// restart rather than fail a delivery that has not started.
			p.setDown(inst)
			p.check()
			continue
		}
		select {
		case <-up:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// start launches the first process.
func (p *plugin) start(ctx context.Context) error {
	inst, err := p.launch(ctx)
	if err != nil {
		return err
	}
	p.setUp(inst)
	p.log.Info("channel plugin started", "command", p.cfg.Command, "pid", inst.pid,
		"name", p.desc.Name, "version", p.desc.Version)
	return nil
}

// command is the plugin's command. Its environment is Env plus the few
// variables of central's own that a program needs (hostEnv), never the rest:
// central's environment holds its database DSN and the secrets that env:
// references name, which are none of a plugin's business. Last comes the
// delivery network policy, which therefore wins over an Env entry of the
// same name.
func (p *plugin) command() *exec.Cmd {
	cmd := exec.Command(p.cfg.Command, p.cfg.Args...)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); inherited(name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, p.cfg.Env...)
	cmd.Env = append(cmd.Env, channel.NetworkPolicyEnv+"="+p.host.NetworkPolicy.Encode())
	return cmd
}

// hostEnv are the variables of central's environment a plugin process
// inherits: what a program needs to run, find certificates and reach the
// network through a proxy, and the Go runtime's settings.
var hostEnv = []string{
	"PATH", "HOME", "USER", "TMPDIR", "TZ", "LANG", "LANGUAGE",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"GODEBUG", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK", "GORACE", "GOCOVERDIR",
}

func inherited(name string) bool {
	return slices.Contains(hostEnv, name) || strings.HasPrefix(name, "LC_")
}

// launch starts a process, checks its checksum and handshake, and asks for
// its description.
func (p *plugin) launch(ctx context.Context) (*instance, error) {
	var secure *goplugin.SecureConfig
	if p.cfg.SHA256 != "" {
		sum, _ := hex.DecodeString(p.cfg.SHA256) // checked by Config.Validate
		secure = &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	// A plugin's standard error is decoded by our LineWriter, not by
	// go-plugin (whose decoder panics on some lines a plugin may write).
	stderr := hclogslog.NewLineWriter(p.log, "channel", "component")
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: channel.Handshake,
		Plugins: goplugin.PluginSet{channel.PluginName: &channel.GRPCPlugin{
			OnCallError: func(error) { p.check() },
		}},
		Cmd:         p.command(),
		SkipHostEnv: true, // command sets the environment

		SecureConfig:     secure,
		UnixSocketConfig: p.socketConfig(),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.host.StartTimeout,
		Logger:           hclogslog.MuteNamed(hclogslog.New(p.log), filepath.Base(p.cfg.Command)),
		Stderr:           stderr,
	})
	inst, err := p.connect(ctx, client)
	if err != nil {
		client.Kill()
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			actual, serr := fileSHA256(p.cfg.Command)
			if serr != nil {
				actual = "unknown (" + serr.Error() + ")"
			}
			return nil, fmt.Errorf("%s: refusing to run it: its SHA-256 checksum is %s, not the pinned %s: %w",
				p.cfg.Command, actual, p.cfg.SHA256, err)
		}
		return nil, err
	}
	return inst, nil
}

// socketConfig is go-plugin's Unix socket configuration: nil (owner only)
// unless the host names a socket group.
func (p *plugin) socketConfig() *goplugin.UnixSocketConfig {
	if p.host.SocketGroup == "" {
		return nil
	}
	return &goplugin.UnixSocketConfig{Group: p.host.SocketGroup}
}

func (p *plugin) connect(ctx context.Context, client *goplugin.Client) (*instance, error) {
	rpc, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.cfg.Command, err)
	}
	raw, err := rpc.Dispense(channel.PluginName)
	if err != nil {
		return nil, fmt.Errorf("%s: dispense channel: %w", p.cfg.Command, err)
	}
	ch, ok := raw.(*channel.Client)
	if !ok {
		return nil, fmt.Errorf("%s: dispensed %T, not a channel client", p.cfg.Command, raw)
	}
	dctx, cancel := context.WithTimeout(ctx, p.host.StartTimeout)
	defer cancel()
	desc, err := ch.Describe(dctx)
	switch {
	case errors.Is(err, channel.ErrNotDescribed):
		desc = channel.Description{Name: p.cfg.Type}
	case err != nil:
		return nil, fmt.Errorf("%s: %w", p.cfg.Command, err)
	case desc.Name != p.cfg.Type:
		p.log.Warn("channel plugin describes itself under another name than its type",
			"name", desc.Name, "command", p.cfg.Command)
	}
	inst := &instance{client: client, ch: ch, started: time.Now()}
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	secret := map[string]bool(nil)
	if len(desc.Settings) > 0 {
		secret = make(map[string]bool, len(desc.Settings))
		for _, st := range desc.Settings {
			secret[st.Name] = st.Secret
		}
	}
	p.mu.Lock()
	p.desc, p.secret = desc, secret
	p.mu.Unlock()
	return inst, nil
}

func (p *plugin) setUp(inst *instance) {
	p.mu.Lock()
	p.inst = inst
	close(p.up)
	p.mu.Unlock()
}

// setDown marks inst gone, if it is the current process.
func (p *plugin) setDown(inst *instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inst == inst && inst != nil {
		p.inst = nil
		p.up = make(chan struct{})
	}
}

// check asks the supervisor to look at the process now.
func (p *plugin) check() {
	select {
	case p.suspect <- struct{}{}:
	default:
	}
}

// supervise restarts the process whenever it exits, until ctx ends.
func (p *plugin) supervise(ctx context.Context) {
	tick := time.NewTicker(p.host.CheckInterval)
	defer tick.Stop()
	delay := p.host.MinRestartDelay
	p.mu.Lock()
	cur := p.inst
	p.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.suspect:
		}
		if !cur.client.Exited() {
			continue
		}
		p.setDown(cur)
		cur.client.Kill()
		_ = cur.ch.Close()
		if time.Since(cur.started) > time.Minute {
			delay = p.host.MinRestartDelay // it ran well: restart quickly
		}
		p.log.Error("channel plugin exited; restarting it", "pid", cur.pid, "after", delay.String())
		next, ok := p.restart(ctx, &delay)
		if !ok {
			return
		}
		cur = next
	}
}

// restart launches a new process, retrying with a growing delay, until it
// runs or ctx ends.
func (p *plugin) restart(ctx context.Context, delay *time.Duration) (*instance, bool) {
	for {
		if !sleep(ctx, *delay) {
			return nil, false
		}
		*delay = min(2**delay, p.host.MaxRestartDelay)
		next, err := p.launch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false
			}
			p.log.Error("channel plugin restart failed", "err", err, "next_try_after", delay.String())
			continue
		}
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
		p.setUp(next)
		p.log.Info("channel plugin restarted", "pid", next.pid)
		return next, true
	}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stop kills the process, if any.
func (p *plugin) stop() {
	p.mu.Lock()
	inst := p.inst
	p.mu.Unlock()
	if inst != nil {
		p.setDown(inst)
		inst.client.Kill()
		_ = inst.ch.Close()
	}
}

func (p *plugin) description() channel.Description {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc
}

func (p *plugin) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Type: p.cfg.Type, Name: p.desc.Name, Version: p.desc.Version, Command: p.cfg.Command,
		Restarts: p.restarts}
	if p.inst != nil {
		s.Running, s.PID, s.Started = true, p.inst.pid, p.inst.started
	}
	return s
}

// fileSHA256 returns the hex SHA-256 checksum of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
