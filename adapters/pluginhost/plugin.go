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
	"sync/atomic"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/time/rate"

	"github.com/siteline/outbox/adapters/internal/hclogslog"
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

	// spawn starts the processes (see spawner); set by start, ended by
	// stop.
	spawn *spawner

	mu   sync.Mutex
	inst *instance // nil while down
	// proc is the latest process started, down or not (one that refuses
	// deliveries while it stops is down but still runs): stop ends it.
	proc *instance
	up   chan struct{} // closed while inst is set
	desc channel.Description
	// secret names the settings to resolve (those desc marks secret); nil
	// when desc has no schema, and no setting is resolved.
	secret   map[string]bool
	restarts int
	hangs    int // processes killed because they stopped answering
}

// instance is one running plugin process.
type instance struct {
	client  *goplugin.Client
	cmd     *exec.Cmd // started: Process is set
	ch      *channel.Client
	pid     int
	started time.Time
	// hung is set when the host killed the process because it stopped
	// answering its pings.
	hung atomic.Bool
	// stopping is set when the process refused a call because it is
	// stopping (channel.ErrStopping: it got SIGTERM).
	stopping *atomic.Bool
}

// stopGrace bounds go-plugin's graceful stop of a process (a shutdown call,
// then SIGKILL 2 s later if it did not exit): a process that does not answer
// the call, a frozen one say, would hold it forever, so it is killed outright
// past stopGrace.
const stopGrace = 5 * time.Second

// kill sends the process SIGKILL (a stopped process dies of it too). The
// os.Process knows when it was reaped: this never hits another process
// that took its pid.
func (inst *instance) kill() { _ = inst.cmd.Process.Kill() }

// stop ends the process and go-plugin's client of it.
func (inst *instance) stop() {
	stopClient(inst.client, inst.cmd)
}

// stopClient ends a go-plugin client and its process: gracefully, or by
// SIGKILL when that takes longer than stopGrace.
func stopClient(client *goplugin.Client, cmd *exec.Cmd) {
	done := make(chan struct{})
	// Ends once the process is gone, which the SIGKILL below ensures.
	go func() {
		defer close(done)
		client.Kill()
	}()
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
	<-done
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
//
// A secret setting whose reference is refused (not allowed, or it cannot
// be resolved) fails the whole delivery, Permanent. A target whose reference
// is refused fails alone, Permanent: the plugin gets the other targets, and
// the result answers per target, the refused ones with their refusal. The
// plugin's answer, one outcome or one per target, is passed on as it gave
// it.
func (p *plugin) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	p.mu.Lock()
	secret := p.secret
	p.mu.Unlock()
	settings, err := resolveSettings(p.host.Secrets, secret, d.Settings)
	if err != nil {
		if refused(err) {
			return ports.Result{Outcome: ports.OutcomePermanent, Error: err.Error()}
		}
		return ports.Result{Outcome: ports.OutcomeTransient, Error: err.Error()}
	}
	targets, failed := resolveTargets(p.host.Secrets, d.Targets)
	if failed != nil && len(targets) == 0 {
		// No target left to deliver to.
		return withRefusedTargets(channel.Result{}, failed)
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
		if failed != nil {
			return withRefusedTargets(res, failed)
		}
		return toPorts(res)
	}
}

// toPorts is a plugin's result as central's: its one outcome, and its
// answer for each target when it gave them (channel.Client took only
// one per target).
func toPorts(res channel.Result) ports.Result {
	out := ports.Result{Outcome: outcome(res.Outcome), Error: res.Error, RetryAfter: res.RetryAfter}
	if len(res.Targets) > 0 {
		out.Targets = make([]ports.TargetResult, len(res.Targets))
		for i, t := range res.Targets {
			out.Targets[i] = ports.TargetResult{Outcome: outcome(t.Outcome), Error: t.Error, RetryAfter: t.RetryAfter}
		}
	}
	return out
}

func outcome(o channel.Outcome) ports.Outcome {
	switch o {
	case channel.Success:
		return ports.OutcomeSuccess
	case channel.Permanent:
		return ports.OutcomePermanent
	}
	return ports.OutcomeTransient
}

// withRefusedTargets answers a delivery some of whose targets were refused
// before the plugin saw them (failed[i], nil for the others) target by
// target: a refused target with its refusal, Permanent (Transient when the
// reference may resolve later, a file that could not be read), the others,
// in order, with the plugin's answer res for the targets it got.
func withRefusedTargets(res channel.Result, failed []error) ports.Result {
	sent := len(failed)
	for _, err := range failed {
		if err != nil {
			sent--
		}
	}
	rs := make([]channel.TargetResult, len(failed))
	j := 0
	for i, err := range failed {
		switch {
		case err == nil && len(res.Targets) == sent:
			rs[i] = res.Targets[j]
			j++
		case err == nil:
			rs[i] = channel.TargetResult{Outcome: res.Outcome, Error: res.Error, RetryAfter: res.RetryAfter}
		case refused(err):
			rs[i] = channel.TargetResult{Outcome: channel.Permanent, Error: err.Error()}
		default:
			rs[i] = channel.TargetResult{Outcome: channel.Transient, Error: err.Error()}
		}
	}
	return toPorts(channel.PerTarget(rs))
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
	p.mu.Lock()
	if p.spawn == nil {
		p.spawn = newSpawner()
	}
	p.mu.Unlock()
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
// same name. On Linux the kernel kills the process when central dies
// (dieWithCentral).
func (p *plugin) command() *exec.Cmd {
	cmd := exec.Command(p.cfg.Command, p.cfg.Args...)
	dieWithCentral(cmd)
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
	stderr := hclogslog.NewLineWriter(p.log, "component").Carries("channel", p.cfg.Type)
	cmd := p.command()
	stopping := new(atomic.Bool)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: channel.Handshake,
		Plugins: goplugin.PluginSet{channel.PluginName: &channel.GRPCPlugin{
			OnCallError: func(err error) {
				if errors.Is(err, channel.ErrStopping) {
					stopping.Store(true)
				}
				p.check()
			},
		}},
		Cmd:         cmd,
		SkipHostEnv: true, // command sets the environment

		SecureConfig:     secure,
		UnixSocketConfig: p.socketConfig(),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.host.StartTimeout,
		Logger:           hclogslog.MuteNamed(hclogslog.New(p.log), filepath.Base(p.cfg.Command)),
		Stderr:           stderr,
	})
	// The process is started on the spawner's thread, which outlives it
	// (its parent-death signal is tied to that thread); the handshake too,
	// as go-plugin makes both in one call.
	p.mu.Lock()
	spawn := p.spawn
	p.mu.Unlock()
	var err error
	if spawn != nil {
		spawn.run(func() { _, err = client.Start() })
	} else {
		_, err = client.Start() // not started by Host.Start: no spawner
	}
	var inst *instance
	if err == nil {
		inst, err = p.connect(ctx, client, cmd)
	}
	if inst != nil {
		inst.stopping = stopping
	}
	if err != nil {
		stopClient(client, cmd)
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

func (p *plugin) connect(ctx context.Context, client *goplugin.Client, cmd *exec.Cmd) (*instance, error) {
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
	inst := &instance{client: client, cmd: cmd, ch: ch, started: time.Now()}
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
	p.inst, p.proc = inst, inst
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
		stopping := false
		if !cur.client.Exited() {
			if !cur.stopping.Load() {
				continue
			}
			// It got SIGTERM and refuses new deliveries: let those in
			// flight end (they wait for the next process meanwhile), then
			// close the connection, which lets it exit.
			stopping = true
			p.log.Info("channel plugin is stopping: waiting for its deliveries in flight", "pid", cur.pid)
			p.setDown(cur)
			_ = cur.ch.Close()
		}
		p.setDown(cur)
		cur.stop()
		_ = cur.ch.Close()
		if time.Since(cur.started) > time.Minute || stopping {
			delay = p.host.MinRestartDelay // it ran well, or was told to stop: restart quickly
		}
		switch {
		case cur.hung.Load():
			p.log.Error("channel plugin stopped answering; restarting it", "pid", cur.pid, "reason", "stopped answering",
				"after", delay.String())
		case stopping:
			p.log.Warn("channel plugin stopped (it was told to: SIGTERM); restarting it", "pid", cur.pid, "reason", "stopped",
				"after", delay.String())
		default:
			p.log.Error("channel plugin exited; restarting it", "pid", cur.pid, "reason", "exited", "after", delay.String())
		}
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

// watch pings the running process every PingInterval and kills it when
// PingFailures pings in a row went unanswered within PingTimeout: a process
// that is alive but answers nothing (frozen, deadlocked, stopped). The
// supervisor then restarts it. It returns when ctx ends.
func (p *plugin) watch(ctx context.Context) {
	tick := time.NewTicker(p.host.PingInterval)
	defer tick.Stop()
	var last *instance
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.mu.Lock()
		inst := p.inst
		p.mu.Unlock()
		if inst == nil || inst.client.Exited() {
			continue // down or dead: the supervisor's business
		}
		if inst != last {
			last, failed = inst, 0
		}
		pctx, cancel := context.WithTimeout(ctx, p.host.PingTimeout)
		err := inst.ch.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			failed = 0
			continue
		case ctx.Err() != nil:
			return
		case inst.client.Exited():
			continue
		}
		failed++
		if failed < p.host.PingFailures {
			p.log.Warn("channel plugin did not answer a ping", "pid", inst.pid, "unanswered", failed,
				"limit", p.host.PingFailures, "timeout", p.host.PingTimeout.String(), "err", err)
			continue
		}
		p.log.Error("channel plugin stopped answering: killing it to restart it", "pid", inst.pid,
			"unanswered", failed, "timeout", p.host.PingTimeout.String(), "err", err)
		p.mu.Lock()
		p.hangs++
		p.mu.Unlock()
		inst.hung.Store(true)
		inst.kill()
		p.check()
		failed = 0
	}
}

// stop kills the process, if any, and ends the spawner.
func (p *plugin) stop() {
	p.mu.Lock()
	inst, spawn := p.proc, p.spawn
	p.spawn = nil
	p.mu.Unlock()
	if inst != nil {
		p.setDown(inst)
		inst.stop()
		_ = inst.ch.Close()
	}
	if spawn != nil {
		spawn.stop()
	}
}

func (p *plugin) description() channel.Description {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc
}

func (p *plugin) status() ports.PluginStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ports.PluginStatus{Type: p.cfg.Type, Name: p.desc.Name, Version: p.desc.Version, Command: p.cfg.Command,
		Restarts: p.restarts, StoppedAnswering: p.hangs}
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
