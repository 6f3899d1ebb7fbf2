package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/raftbuffer"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// SiteConfig is the configuration of `outbox site`: one node of a site's
// Raft group. configs/site-*.yaml are a pair plus a witness on one machine;
// configs/README.md describes every setting.
type SiteConfig struct {
	// Site is the site id stamped on every notification (central accepts
	// from this site only rows stamped with it); required.
	Site string `yaml:"site"`
	// Node is this node's id: one of Members; required.
	Node string `yaml:"node"`
	// DataDir holds the node's Raft log, snapshots and buffer. Default
	// ./data/site-NODE.
	DataDir string `yaml:"data_dir"`
	// Members is the whole group, this node included: two data nodes and
	// an optional witness (or any odd number of voters).
	Members []MemberConfig    `yaml:"members"`
	Raft    RaftConfig        `yaml:"raft"`
	API     SiteAPIConfig     `yaml:"api"`
	Central CentralLinkConfig `yaml:"central"`
	Forward ForwardConfig     `yaml:"forward"`
	Metrics MetricsConfig     `yaml:"metrics"`
	Log     LogConfig         `yaml:"log"`
}

// MemberConfig is one node of the group.
type MemberConfig struct {
	ID string `yaml:"id"`
	// Raft is the node's Raft address (host:port) as the others reach it.
	Raft string `yaml:"raft"`
	// API is the node's site API address as scripts and the other nodes
	// reach it (a follower passes Sends to the leader there).
	API string `yaml:"api"`
	// Witness marks a voter that prefers not to lead.
	Witness bool `yaml:"witness"`
}

// RaftConfig configures the Raft transport.
type RaftConfig struct {
	// Bind is the address to listen on when it differs from the member's
	// raft address (0.0.0.0:7201 behind NAT, say).
	Bind string `yaml:"bind"`
	// TLS encrypts and authenticates Raft traffic: every node presents Cert,
	// whose CN (or a DNS name) is its member id, and checks the others'
	// against CA. Required when a Raft address is off loopback, and with
	// api.tls in a group of more than one member. The nodes also present
	// Cert to each other's site API when they pass calls on (both ways: a
	// follower passes a call on only to a leader whose certificate CA
	// verifies and which names a member).
	TLS TLSFiles `yaml:"tls"`
}

// SiteAPIConfig configures the site API scripts call.
type SiteAPIConfig struct {
	// Listen is the address to listen on when it differs from the member's
	// api address.
	Listen string `yaml:"listen"`
	// Token, when set, authenticates a caller that presents it (a
	// reference, env:NAME or file:/path).
	Token string `yaml:"token"`
	// TLS serves the API over TLS with Cert and Key; CA, when set, verifies
	// scripts' client certificates, each of which then authenticates its
	// caller. Off loopback TLS is required, and a token or CA with it.
	TLS TLSFiles `yaml:"tls"`
	// Limits bound what callers can make the API spend.
	Limits APILimitsConfig `yaml:"limits"`
}

// APILimitsConfig bounds the site API (siteapi.Limits).
type APILimitsConfig struct {
	// Rate is the calls a second one caller (its certificate's CN, else its
	// address) may make on average, Burst how many at once.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// MaxRequestBytes bounds one request; 0 fits the largest Send that
	// forward.max_subject_bytes and forward.max_body_bytes allow.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// ConnsPerAddress and ConnsTotal bound the connections open at once
	// from one client address, and in all.
	ConnsPerAddress int `yaml:"conns_per_address"`
	ConnsTotal      int `yaml:"conns_total"`
	// MaxStreams bounds the calls one connection runs at once.
	MaxStreams int `yaml:"max_streams"`
	// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake;
	// IdleTimeout closes a connection without calls for that long.
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
	IdleTimeout      Duration `yaml:"idle_timeout"`
}

// CentralLinkConfig says how the node reaches central.
type CentralLinkConfig struct {
	// Addr is central's link address (host:port): one central node, or a
	// host name whose addresses are all central nodes. Addr or Addrs is
	// required.
	Addr string `yaml:"addr"`
	// Addrs are the link addresses of several central nodes sharing one
	// database, instead of Addr: the node forwards to the first that
	// answers and moves to the next when it fails.
	Addrs []string `yaml:"addrs"`
	// Token is this site's token at central (a reference).
	Token string `yaml:"token"`
	// TLS: CA verifies central's certificate; Cert and Key, when set, are
	// this site's client certificate (its CN the site id).
	TLS TLSFiles `yaml:"tls"`
}

// ForwardConfig configures Send's limits and the forwarder (core.SiteConfig).
type ForwardConfig struct {
	Batch           int      `yaml:"batch"`
	RetryInterval   Duration `yaml:"retry_interval"`
	CallTimeout     Duration `yaml:"call_timeout"`
	MaxSubjectBytes int      `yaml:"max_subject_bytes"`
	MaxBodyBytes    int      `yaml:"max_body_bytes"`
}

// MetricsConfig configures the Prometheus endpoint.
type MetricsConfig struct {
	// Listen is the address of /metrics; empty serves none.
	Listen string `yaml:"listen"`
}

// siteSettings is every site setting the environment can set.
var siteSettings = []setting[SiteConfig]{
	{"site", "OUTBOX_SITE", "site", "site `id` stamped on every notification", func(c *SiteConfig) any { return &c.Site }},
	{"node", "OUTBOX_SITE_NODE", "node", "this node's `id`, one of members", func(c *SiteConfig) any { return &c.Node }},
	{"data_dir", "OUTBOX_DATA_DIR", "data-dir", "`directory` of the node's Raft log and buffer", func(c *SiteConfig) any { return &c.DataDir }},
	{"api.token", "OUTBOX_SITE_API_TOKEN", "", "", func(c *SiteConfig) any { return &c.API.Token }},
	{"central.addr", "OUTBOX_CENTRAL_ADDR", "central", "central's link `address` host:port", func(c *SiteConfig) any { return &c.Central.Addr }},
	{"central.addrs", "OUTBOX_CENTRAL_ADDRS", "", "", func(c *SiteConfig) any { return &c.Central.Addrs }},
	{"central.token", "OUTBOX_CENTRAL_TOKEN", "", "", func(c *SiteConfig) any { return &c.Central.Token }},
	{"forward.retry_interval", "OUTBOX_FORWARD_RETRY_INTERVAL", "", "", func(c *SiteConfig) any { return &c.Forward.RetryInterval }},
	{"metrics.listen", "OUTBOX_METRICS_LISTEN", "metrics", "`address` of the Prometheus /metrics endpoint", func(c *SiteConfig) any { return &c.Metrics.Listen }},
	{"log.level", "OUTBOX_LOG_LEVEL", "log-level", "log `level`: debug, info, warn or error", func(c *SiteConfig) any { return &c.Log.Level }},
	{"log.format", "OUTBOX_LOG_FORMAT", "log-format", "log `format`: auto, text or json", func(c *SiteConfig) any { return &c.Log.Format }},
}

// siteSchema is the configuration of `outbox site`.
var siteSchema = schema[SiteConfig]{
	defaults: defaultSiteConfig,
	settings: siteSettings,
	validate: SiteConfig.Validate,
	log:      func(c SiteConfig) LogConfig { return c.Log },
	ownRefs:  func(c *SiteConfig) []*string { return []*string{&c.API.Token, &c.Central.Token} },
	warn: func(l *loaded[SiteConfig]) {
		for key, v := range map[string]string{"api.token": l.cfg.API.Token, "central.token": l.cfg.Central.Token} {
			if v != "" && !ports.IsSecretRef(v) && !strings.HasPrefix(l.sources[key], "env ") {
				l.warnings = append(l.warnings, key+" is a token in clear ("+l.sources[key]+"); write a reference, env:NAME or file:/path")
			}
		}
	},
}

// defaultSiteConfig returns the defaults: core's forwarder defaults, info
// logs in the automatic format.
func defaultSiteConfig() SiteConfig {
	d := core.SiteConfig{}.WithDefaults()
	return SiteConfig{
		API: SiteAPIConfig{Limits: APILimitsConfig{
			Rate:             siteapi.DefaultRate,
			Burst:            siteapi.DefaultBurst,
			ConnsPerAddress:  siteapi.DefaultConnsPerAddress,
			ConnsTotal:       siteapi.DefaultConnsTotal,
			MaxStreams:       siteapi.DefaultMaxStreams,
			HandshakeTimeout: Duration(guard.DefaultHandshakeTimeout),
			IdleTimeout:      Duration(guard.DefaultIdleTimeout),
		}},
		Forward: ForwardConfig{
			Batch:           d.ForwardBatch,
			RetryInterval:   Duration(d.RetryInterval),
			CallTimeout:     Duration(d.CallTimeout),
			MaxSubjectBytes: d.MaxSubjectBytes,
			MaxBodyBytes:    d.MaxBodyBytes,
		},
		Log: LogConfig{Level: "info", Format: "auto"},
	}
}

// Validate returns one *SettingError per broken rule, joined, or nil.
func (c SiteConfig) Validate() error {
	var r rules
	for key, v := range map[string]string{"site": c.Site, "node": c.Node} {
		if strings.TrimSpace(v) == "" {
			r.add(key, "required")
		} else if i := strings.IndexFunc(v, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-", c))
		}); i >= 0 || len(v) > 64 {
			r.add(key, "%q: use at most 64 letters, digits, '.', '_' and '-'", v)
		}
	}
	self := false
	ids, addrs := map[string]bool{}, map[string]string{}
	witnesses := 0
	for i, m := range c.Members {
		key := fmt.Sprintf("members[%d]", i)
		if m.ID == "" {
			r.add(key+".id", "required")
		} else if ids[m.ID] {
			r.add(key+".id", "%q is listed twice", m.ID)
		}
		ids[m.ID] = true
		self = self || m.ID == c.Node
		for name, a := range map[string]string{"raft": m.Raft, "api": m.API} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				r.add(key+"."+name, "%q is not host:port", a)
			} else if prev, dup := addrs[a]; dup {
				r.add(key+"."+name, "%s is also %s", a, prev)
			} else {
				addrs[a] = key + "." + name
			}
		}
		if m.Witness {
			witnesses++
		}
	}
	switch {
	case len(c.Members) == 0:
		r.add("members", "required: the group's nodes, this one included")
	case c.Node != "" && !self:
		r.addRelated("members", "node", "node %q is not among the members", c.Node)
	case witnesses > 1:
		r.add("members", "%d witnesses; a group has at most one", witnesses)
	case witnesses == len(c.Members):
		r.add("members", "a group needs at least one data node besides the witness")
	}
	for key, a := range map[string]string{"raft.bind": c.Raft.Bind, "api.listen": c.API.Listen, "metrics.listen": c.Metrics.Listen} {
		if a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				r.add(key, "%q is not host:port", a)
			}
		}
	}
	r = append(r, c.offLoopbackRules()...)
	r = append(r, c.API.Limits.validate(c.Forward)...)
	r = append(r, c.Raft.TLS.validate("raft.tls", true)...)
	if c.Raft.TLS.set() && c.Raft.TLS.CA == "" {
		r.add("raft.tls.ca", "required with raft.tls: each node checks the others' certificates")
	}
	r = append(r, c.API.TLS.validate("api.tls", true)...)
	if key, _ := c.offLoopback("raft.bind", c.Raft.Bind, "raft"); key == "" && c.API.TLS.Cert != "" && len(c.Members) > 1 && !c.Raft.TLS.set() {
		r.addRelated("raft.tls", "api.tls", "required (cert, key and ca) with api.tls in a group of %d members: a follower passes calls, with the scripts' token, to the leader's API only once the leader's Raft certificate proved it a member", len(c.Members))
	}
	r = append(r, c.Central.validateAddrs()...)
	r = append(r, c.Central.TLS.validate("central.tls", false)...)
	if c.Central.Token == "" && c.Central.TLS.Cert == "" {
		r.add("central", "no credentials: give central.token or a client certificate (central.tls.cert)")
	}
	for key, v := range map[string]string{"api.token": c.API.Token, "central.token": c.Central.Token} {
		if strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "file:") {
			if !ports.IsSecretRef(v) {
				r.add(key, "%q names no variable or file", v)
			}
		}
	}
	f := c.Forward
	for key, v := range map[string]int{"forward.batch": f.Batch, "forward.max_subject_bytes": f.MaxSubjectBytes, "forward.max_body_bytes": f.MaxBodyBytes} {
		if v <= 0 {
			r.add(key, "must be positive, got %d (leave it out for the default)", v)
		}
	}
	for key, d := range map[string]Duration{"forward.retry_interval": f.RetryInterval, "forward.call_timeout": f.CallTimeout} {
		if d <= 0 {
			r.add(key, "must be positive, got %s (leave it out for the default)", d)
		}
	}
	r = append(r, c.Log.validate()...)
	if len(r) == 0 {
		if err := c.CoreConfig().Validate(); err != nil {
			r.add("forward", "%v", err)
		}
	}
	return errors.Join(r...)
}

// validateAddrs checks central.addr or central.addrs: one of them, each
// address host:port with a port from 1 to 65535, none listed twice, and
// TLS when any is off loopback.
func (l CentralLinkConfig) validateAddrs() rules {
	var r rules
	switch {
	case l.Addr != "" && len(l.Addrs) > 0:
		r.addRelated("central.addrs", "central.addr", "central.addr is set too: give one central in central.addr or several in central.addrs, not both")
		return r
	case l.Addr == "" && len(l.Addrs) == 0:
		r.add("central.addr", "required: central's link address host:port (or central.addrs, a list of several centrals)")
		return r
	}
	keys, addrs := []string{"central.addr"}, []string{l.Addr}
	if l.Addr == "" {
		keys, addrs = nil, l.Addrs
		for i := range l.Addrs {
			keys = append(keys, fmt.Sprintf("central.addrs[%d]", i))
		}
	}
	seen := map[string]string{}
	offKey := ""
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			r.add(keys[i], "%q is not host:port", a)
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			r.add(keys[i], "%q: the port is not a number from 1 to 65535", a)
			continue
		}
		if prev, dup := seen[a]; dup {
			r.add(keys[i], "%s is also %s", a, prev)
			continue
		}
		seen[a] = keys[i]
		if offKey == "" && !guard.LoopbackHost(host) {
			offKey = keys[i]
		}
	}
	if offKey != "" && !l.TLS.set() {
		r.addRelated("central.tls", offKey, "required: central %s is not on loopback, and the link must not run in clear", addrs[slices.Index(keys, offKey)])
	}
	return r
}

// addrs returns the central addresses: Addr, or Addrs.
func (l CentralLinkConfig) addrs() []string {
	if l.Addr != "" {
		return []string{l.Addr}
	}
	return l.Addrs
}

// offLoopbackRules refuses an entrance that can be reached from the network
// without its protection: Raft without mutual TLS (whoever reaches the port
// can write to the buffer), the site API without TLS (a token and the
// notifications would cross the network in clear) or without credentials.
func (c SiteConfig) offLoopbackRules() rules {
	var r rules
	t := c.Raft.TLS
	if key, addr := c.offLoopback("raft.bind", c.Raft.Bind, "raft"); key != "" && (t.Cert == "" || t.Key == "" || t.CA == "") {
		r.addRelated("raft.tls", key, "required (cert, key and ca): %s %s is off loopback, and without mutual TLS whoever reaches the Raft port can write to the buffer", key, addr)
	}
	if key, addr := c.offLoopback("api.listen", c.API.Listen, "api"); key != "" {
		if c.API.TLS.Cert == "" || c.API.TLS.Key == "" {
			r.addRelated("api.tls", key, "required (cert and key): %s %s is off loopback, and tokens and notifications must not cross the network in clear", key, addr)
		}
		if c.API.Token == "" && c.API.TLS.CA == "" {
			r.addRelated("api", key, "no credentials: %s %s is off loopback; give api.token, or api.tls.ca to take client certificates, or both", key, addr)
		}
	}
	return r
}

// offLoopback returns the first address of an entrance that is off
// loopback, and its key: own (the bind or listen setting, ownKey), then
// each member's field ("raft" or "api"); "" when all are on loopback.
// Addresses that are not host:port are reported by their own rule.
func (c SiteConfig) offLoopback(ownKey, own, field string) (key, addr string) {
	off := func(a string) bool {
		_, _, err := net.SplitHostPort(a)
		return err == nil && !guard.OnLoopback(a)
	}
	if off(own) {
		return ownKey, own
	}
	for i, m := range c.Members {
		a := m.Raft
		if field == "api" {
			a = m.API
		}
		if off(a) {
			return fmt.Sprintf("members[%d].%s", i, field), a
		}
	}
	return "", ""
}

// validate checks the API limits; f gives the size of the largest Send.
func (l APILimitsConfig) validate(f ForwardConfig) rules {
	var r rules
	if l.Rate <= 0 {
		r.add("api.limits.rate", "must be positive, got %g (leave it out for the default)", l.Rate)
	}
	for key, v := range map[string]int{"api.limits.burst": l.Burst, "api.limits.conns_per_address": l.ConnsPerAddress,
		"api.limits.conns_total": l.ConnsTotal, "api.limits.max_streams": l.MaxStreams} {
		if v <= 0 {
			r.add(key, "must be positive, got %d (leave it out for the default)", v)
		}
	}
	if l.ConnsPerAddress > 0 && l.ConnsTotal > 0 && l.ConnsTotal < l.ConnsPerAddress {
		r.addRelated("api.limits.conns_total", "api.limits.conns_per_address", "%d is below api.limits.conns_per_address (%d)", l.ConnsTotal, l.ConnsPerAddress)
	}
	for key, d := range map[string]Duration{"api.limits.handshake_timeout": l.HandshakeTimeout, "api.limits.idle_timeout": l.IdleTimeout} {
		if d <= 0 {
			r.add(key, "must be positive, got %s (leave it out for the default)", d)
		}
	}
	if need := f.MaxSubjectBytes + f.MaxBodyBytes + minSendRoom; l.MaxRequestBytes < 0 || (l.MaxRequestBytes > 0 && l.MaxRequestBytes < need) {
		r.addRelated("api.limits.max_request_bytes", "forward.max_body_bytes", "%d is below %d, the largest Send forward.max_subject_bytes and forward.max_body_bytes allow (leave it out to derive it)", l.MaxRequestBytes, need)
	}
	return r
}

// minSendRoom is what a Send carries besides its subject and body: the id,
// the list and the provenance (200 bytes each at most) and the framing.
const minSendRoom = 4 << 10

// apiLimits returns the site API's limits.
func (c SiteConfig) apiLimits() siteapi.Limits {
	l := c.API.Limits
	size := l.MaxRequestBytes
	if size == 0 {
		size = siteapi.RequestBytes(c.Forward.MaxSubjectBytes, c.Forward.MaxBodyBytes)
	}
	return siteapi.Limits{
		Rate:  l.Rate,
		Burst: l.Burst,
		Conns: guard.ConnLimits{PerAddress: l.ConnsPerAddress, Total: l.ConnsTotal},
		GRPC: guard.GRPCLimits{
			MaxRecvMsgBytes:      size,
			MaxConcurrentStreams: uint32(l.MaxStreams),
			HandshakeTimeout:     time.Duration(l.HandshakeTimeout),
			IdleTimeout:          time.Duration(l.IdleTimeout),
		},
	}
}

// member returns this node's member entry.
func (c SiteConfig) member() MemberConfig {
	for _, m := range c.Members {
		if m.ID == c.Node {
			return m
		}
	}
	return MemberConfig{}
}

// dataDir returns the node's data directory.
func (c SiteConfig) dataDir() string {
	if c.DataDir != "" {
		return c.DataDir
	}
	return filepath.Join("data", "site-"+c.Node)
}

// CoreConfig returns the core configuration of the site.
func (c SiteConfig) CoreConfig() core.SiteConfig {
	return core.SiteConfig{
		Site:            c.Site,
		MaxSubjectBytes: c.Forward.MaxSubjectBytes,
		MaxBodyBytes:    c.Forward.MaxBodyBytes,
		ForwardBatch:    c.Forward.Batch,
		RetryInterval:   time.Duration(c.Forward.RetryInterval),
		CallTimeout:     time.Duration(c.Forward.CallTimeout),
	}
}

// RaftConfig returns the buffer's Raft configuration, without TLS and
// logger (see site.go).
func (c SiteConfig) RaftConfig() raftbuffer.Config {
	me := c.member()
	bind := c.Raft.Bind
	if bind == "" {
		bind = me.Raft
	}
	peers := make([]raftbuffer.Peer, len(c.Members))
	for i, m := range c.Members {
		peers[i] = raftbuffer.Peer{ID: m.ID, Address: m.Raft, Witness: m.Witness}
	}
	return raftbuffer.Config{
		NodeID:    c.Node,
		Dir:       c.dataDir(),
		Bind:      bind,
		Advertise: me.Raft,
		Peers:     peers,
	}
}

// apiAddr returns the site API address of member id, "" if unknown.
func (c SiteConfig) apiAddr(id string) string {
	for _, m := range c.Members {
		if m.ID == id {
			return m.API
		}
	}
	return ""
}
