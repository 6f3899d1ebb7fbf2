// Package pluginhost runs channel plugins and offers them to the core as
// ports.Channel values. Each configured channel type is one plugin process,
// started through hashicorp/go-plugin over gRPC with AutoMTLS, optionally
// pinned to a SHA-256 checksum of its binary, restarted with backoff when it
// crashes or stops answering the host's pings, killed when the host closes,
// and (on Linux) killed by the kernel when central dies. Deliveries through a plugin are
// bounded in number (MaxConcurrency) and rate (the channel's rate limit), and
// have their secret references resolved just before they are sent, under the
// policy of Config.Secrets and only in the settings a plugin's schema marks
// secret.
package pluginhost

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/user"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siteline/outbox/adapters/support/secretref"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
)

// ErrUnknownChannel is returned for a channel type no plugin delivers.
var ErrUnknownChannel = errors.New("no channel plugin for this type")

// Plugin configures one channel plugin process.
type Plugin struct {
	// Type is the channel type the plugin delivers ("email"); lists of this
	// type are delivered through it.
	Type string
	// Command is the plugin binary's path and Args its arguments (a built-in
	// channel is the outbox binary with args plugin serve <type>).
	Command string
	Args    []string
	// Env holds NAME=value pairs of the process's environment. Of central's
	// own environment the process gets only what a program needs (PATH,
	// HOME, locale, proxies, certificate locations, the Go runtime's
	// variables): never central's settings nor the secrets references name.
	Env []string
	// SHA256, when set, is the hex SHA-256 checksum the binary must have:
	// a binary that differs is never started.
	SHA256 string
	// MaxConcurrency bounds the deliveries in flight through this plugin.
	// Default 64.
	MaxConcurrency int
}

// Config configures a Host.
type Config struct {
	// Plugins are the channel plugins to run, one per type.
	Plugins []Plugin
	// Logger receives the host's log and every plugin's log lines.
	Logger *slog.Logger
	// Secrets is what the secret references of a delivery may read: its
	// targets, and the settings the plugin's schema marks secret (no
	// other setting is resolved). A reference it refuses fails the
	// delivery Permanent, naming the reference. The zero policy refuses
	// every reference.
	Secrets secretref.Policy
	// SocketGroup, when set (a group name or id), has every plugin give
	// the Unix socket central connects to this group, group-writable
	// (go-plugin's PLUGIN_UNIX_SOCKET_GROUP). It lets a plugin run as
	// another user (started through a wrapper such as setpriv or sudo)
	// while central, a member of the group, still reaches it; the
	// plugin's user must be a member too.
	SocketGroup string
	// StartTimeout bounds the start of one plugin process (handshake and
	// description). Default 30 s.
	StartTimeout time.Duration
	// MinRestartDelay and MaxRestartDelay bound the backoff between restarts
	// of a crashed plugin: the first restart waits MinRestartDelay, each
	// failed or short-lived start doubles it up to MaxRestartDelay. Defaults
	// 100 ms and 30 s.
	MinRestartDelay time.Duration
	MaxRestartDelay time.Duration
	// CheckInterval is how often the host checks that each plugin process
	// is alive (a failed call checks at once). Default 250 ms.
	CheckInterval time.Duration
	// PingInterval is how often the host pings each plugin process (gRPC
	// health check on the deliveries' connection), PingTimeout how long it
	// waits for the answer, and PingFailures how many pings in a row may go
	// unanswered before the host kills the process as hung; the supervisor
	// then restarts it, and the deliveries it held end Transient. A slow
	// delivery does not delay a ping. Defaults 5 s, 5 s and 3: a process
	// that freezes is restarted within about 20 s.
	PingInterval time.Duration
	PingTimeout  time.Duration
	PingFailures int
	// NetworkPolicy is the delivery network policy every plugin process is
	// given in its environment (channel.NetworkPolicyEnv, set after
	// Plugin.Env so that a plugin's own Env cannot replace it). Default:
	// channel.DefaultNetworkPolicy().
	NetworkPolicy *channel.NetworkPolicy
}

// DefaultMaxConcurrency is the default of Plugin.MaxConcurrency.
const DefaultMaxConcurrency = 64

// Defaults of the pings (Config.PingInterval, PingTimeout, PingFailures).
const (
	DefaultPingInterval = 5 * time.Second
	DefaultPingTimeout  = 5 * time.Second
	DefaultPingFailures = 3
)

// Defaults of the supervision (Config.StartTimeout, MinRestartDelay,
// MaxRestartDelay, CheckInterval).
const (
	DefaultStartTimeout    = 30 * time.Second
	DefaultMinRestartDelay = 100 * time.Millisecond
	DefaultMaxRestartDelay = 30 * time.Second
	DefaultCheckInterval   = 250 * time.Millisecond
)

// WithDefaults returns c with every zero field set to its default (a nil
// Logger discards, a nil NetworkPolicy is channel.DefaultNetworkPolicy());
// a negative one is kept, for Validate to report.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.StartTimeout, DefaultStartTimeout)
	set(&c.MinRestartDelay, DefaultMinRestartDelay)
	set(&c.MaxRestartDelay, max(DefaultMaxRestartDelay, c.MinRestartDelay))
	set(&c.CheckInterval, DefaultCheckInterval)
	set(&c.PingInterval, DefaultPingInterval)
	set(&c.PingTimeout, DefaultPingTimeout)
	if c.PingFailures == 0 {
		c.PingFailures = DefaultPingFailures
	}
	if c.NetworkPolicy == nil {
		c.NetworkPolicy = channel.DefaultNetworkPolicy()
	}
	c.Plugins = slices.Clone(c.Plugins)
	for i := range c.Plugins {
		if c.Plugins[i].MaxConcurrency == 0 {
			c.Plugins[i].MaxConcurrency = DefaultMaxConcurrency
		}
	}
	return c
}

// Validate returns one error per broken rule, joined. The supervision's
// settings are checked as given, where a zero is no default but a value
// (call it on c.WithDefaults() to check what will run), each as a
// *ports.FieldError on its field: every duration and PingFailures must be
// positive, MaxRestartDelay not below MinRestartDelay, and SocketGroup a
// group of this machine. Of the plugins: a plugin without a type or
// command, two plugins of one type, a checksum that is not 64 hex digits, a
// negative MaxConcurrency.
func (c Config) Validate() error {
	var fe ports.FieldErrors
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"StartTimeout", c.StartTimeout}, {"MinRestartDelay", c.MinRestartDelay}, {"MaxRestartDelay", c.MaxRestartDelay},
		{"CheckInterval", c.CheckInterval}, {"PingInterval", c.PingInterval}, {"PingTimeout", c.PingTimeout},
	} {
		if f.d <= 0 {
			fe.Add(f.name, "must be positive, got %s (leave it out for the default)", f.d)
		}
	}
	if c.MinRestartDelay > 0 && c.MaxRestartDelay > 0 && c.MaxRestartDelay < c.MinRestartDelay {
		fe.Add("MaxRestartDelay", "%s is below MinRestartDelay (%s)", c.MaxRestartDelay, c.MinRestartDelay)
	}
	if c.PingFailures <= 0 {
		fe.Add("PingFailures", "must be positive, got %d (leave it out for the default)", c.PingFailures)
	}
	if g := c.SocketGroup; g != "" {
		if _, err := user.LookupGroup(g); err != nil {
			if _, err := user.LookupGroupId(g); err != nil {
				fe.Add("SocketGroup", "no group %q on this machine", g)
			}
		}
	}
	errs := []error(fe)
	seen := map[string]bool{}
	for i, p := range c.Plugins {
		at := fmt.Sprintf("plugins[%d]", i)
		switch {
		case strings.TrimSpace(p.Type) == "":
			errs = append(errs, fmt.Errorf("%s: no channel type", at))
		case seen[p.Type]:
			errs = append(errs, fmt.Errorf("%s: a second plugin for channel type %q", at, p.Type))
		}
		seen[p.Type] = true
		if strings.TrimSpace(p.Command) == "" {
			errs = append(errs, fmt.Errorf("%s (%s): no command", at, p.Type))
		}
		if p.SHA256 != "" {
			if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
				errs = append(errs, fmt.Errorf("%s (%s): sha256 must be 64 hex digits", at, p.Type))
			}
		}
		if p.MaxConcurrency < 0 {
			errs = append(errs, fmt.Errorf("%s (%s): max_concurrency must not be negative", at, p.Type))
		}
	}
	return errors.Join(errs...)
}

// Host runs the configured channel plugins. It is a ports.ChannelRegistry.
// Start launches the plugins, Close stops them; between the two a Host is
// safe for concurrent use.
type Host struct {
	cfg     Config
	log     *slog.Logger
	plugins map[string]*plugin

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ ports.ChannelRegistry = (*Host)(nil)

// New checks cfg and builds a Host; nothing runs until Start.
func New(cfg Config) (*Host, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("plugin host: %w", err)
	}
	h := &Host{cfg: cfg, log: cfg.Logger, plugins: make(map[string]*plugin, len(cfg.Plugins))}
	for _, pc := range cfg.Plugins {
		h.plugins[pc.Type] = newPlugin(pc, &h.cfg, cfg.Logger.With("channel", pc.Type))
	}
	return h, nil
}

// Start launches every plugin process and waits until each answered its
// handshake and description. If one cannot start (its binary is missing or
// fails its checksum, it does not speak the protocol), Start stops the others
// and returns the error. After Start, a supervisor per plugin restarts it
// when it exits, and a watcher pings it and kills it when it stops
// answering, until Close.
func (h *Host) Start(ctx context.Context) error {
	var errs []error
	for _, t := range h.Types() {
		if err := h.plugins[t].start(ctx); err != nil {
			errs = append(errs, fmt.Errorf("start channel plugin %s: %w", t, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, p := range h.plugins {
			p.stop()
		}
		return err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	for _, p := range h.plugins {
		h.wg.Go(func() { p.supervise(sctx) })
		h.wg.Go(func() { p.watch(sctx) })
	}
	return nil
}

// Close stops the supervisors and kills every plugin process, waiting for
// them to exit (a process that does not answer go-plugin's shutdown call is
// killed outright after a few seconds). Deliveries still running end with a
// Transient result.
func (h *Host) Close() error {
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
	for _, p := range h.plugins {
		p.stop()
	}
	return nil
}

// Types returns the channel types the host runs plugins for, sorted.
func (h *Host) Types() []string { return slices.Sorted(maps.Keys(h.plugins)) }

// Channel implements ports.ChannelRegistry.
func (h *Host) Channel(typ string) (ports.Channel, bool) {
	p, ok := h.plugins[typ]
	if !ok {
		return nil, false
	}
	return p, true
}

// Describe returns the description the plugin of typ gave at its last start.
func (h *Host) Describe(typ string) (channel.Description, error) {
	p, ok := h.plugins[typ]
	if !ok {
		return channel.Description{}, fmt.Errorf("%s: %w", typ, ErrUnknownChannel)
	}
	return p.description(), nil
}

// ValidateSettings checks the settings of channel type typ against its
// plugin's schema, before any delivery: required settings present, values
// allowed, no unknown setting, and every secret setting given as a reference
// (env:NAME or file:/path), never in clear. Each error wraps ports.ErrInvalid
// and names the setting, never its value.
func (h *Host) ValidateSettings(typ string, settings map[string]string) error {
	d, err := h.Describe(typ)
	if err != nil {
		return err
	}
	errs := []error{d.Validate(settings)}
	for _, s := range d.Settings {
		if v := settings[s.Name]; s.Secret && v != "" && !ports.IsSecretRef(v) {
			errs = append(errs, fmt.Errorf("%s: secret setting %q must be a reference (env:NAME or file:/path), not clear text", typ, s.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", err, ports.ErrInvalid)
	}
	return nil
}

// Status returns the status of every plugin, sorted by type.
func (h *Host) Status() []ports.PluginStatus {
	out := make([]ports.PluginStatus, 0, len(h.plugins))
	for _, t := range h.Types() {
		out = append(out, h.plugins[t].status())
	}
	return out
}
