package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/time/rate"

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

	mu       sync.Mutex
	inst     *instance     // nil while down
	up       chan struct{} // closed while inst is set
	desc     channel.Description
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
// references, waits for a free slot, the rate limit and a running process
// (all within ctx), and makes the delivery. A delivery the process was
// making when it died is Transient: it may or may not have happened.
func (p *plugin) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	settings, targets, err := resolveDelivery(d.Settings, d.Targets)
	if err != nil {
		return ports.Result{Outcome: ports.OutcomePermanent, Error: err.Error()}
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-ctx.Done():
		return transient("no free delivery slot before the deadline", ctx.Err())
	}
	if err := p.wait(ctx, d.RateLimit); err != nil {
		return ports.Result{Outcome: ports.OutcomeTransient, Error: err.Error()}
	}
	inst, err := p.running(ctx)
	if err != nil {
		return transient("channel plugin not running", err)
	}
	n := d.Notification
	res := inst.ch.Deliver(ctx, channel.Request{
		Notification: channel.Notification{
			ID: n.ID, List: n.List, Subject: n.Subject, Body: n.Body, TypeData: n.TypeData,
			Priority: n.Priority, SourceSite: n.SourceSite, CreatedAt: n.CreatedAt, Attempt: n.RetryCount + 1,
		},
		Targets:  targets,
		Settings: settings,
	})
	out := ports.Result{ResolvedTargets: res.ResolvedTargets, Error: res.Error, RetryAfter: res.RetryAfter}
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

func transient(what string, err error) ports.Result {
	return ports.Result{Outcome: ports.OutcomeTransient, Error: fmt.Sprintf("%s: %v", what, err)}
}

// wait takes a token of the channel's rate limit, following a change of the
// limit. It fails at once when the token would come after ctx's deadline.
func (p *plugin) wait(ctx context.Context, perSecond float64) error {
	limit := rate.Inf
	if perSecond > 0 {
		limit = rate.Limit(perSecond)
	}
	if p.limiter.Limit() != limit {
		p.limiter.SetLimit(limit)
		p.limiter.SetBurst(max(1, int(perSecond)))
	}
	if err := p.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("rate limit of %g/s reached, no delivery slot before the deadline: %w", perSecond, err)
	}
	return nil
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

func (p *plugin) command() *exec.Cmd {
	cmd := exec.Command(p.cfg.Command, p.cfg.Args...)
	// go-plugin would append central's environment after Env, so that it
	// would win over Env; the host adds it first instead (SkipHostEnv).
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	return cmd
}

// launch starts a process, checks its checksum and handshake, and asks for
// its description.
func (p *plugin) launch(ctx context.Context) (*instance, error) {
	var secure *goplugin.SecureConfig
	if p.cfg.SHA256 != "" {
		sum, _ := hex.DecodeString(p.cfg.SHA256) // checked by Config.Validate
		secure = &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: channel.Handshake,
		Plugins: goplugin.PluginSet{channel.PluginName: &channel.GRPCPlugin{
			OnCallError: func(error) { p.check() },
		}},
		Cmd:              p.command(),
		SkipHostEnv:      true,
		SecureConfig:     secure,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.host.StartTimeout,
		Logger:           newHclogger(p.log),
	})
	inst, err := p.connect(ctx, client)
	if err != nil {
		client.Kill()
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("%s: refusing to run it, its SHA-256 checksum is not the pinned one: %w", p.cfg.Command, err)
		}
		return nil, err
	}
	return inst, nil
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
	p.mu.Lock()
	p.desc = desc
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
