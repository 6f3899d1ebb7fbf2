package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/raftbuffer"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/settings"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// SiteConfig is the configuration of `outbox site`: one node of a site's
// Raft group. configs/site-*.yaml are a pair plus a witness on one machine;
// siteSettings declares every setting, and configs/README.md describes each.
type SiteConfig struct {
	// Core is the site's core configuration: the site id stamped on every
	// notification (central accepts from this site only rows stamped with
	// it), Send's limits and the forwarder.
	Core core.SiteConfig
	// Node is this node's id: one of Members; required.
	Node string
	// DataDir holds the node's Raft log, snapshots and buffer. Default
	// ./data/site-NODE.
	DataDir string
	// Members is the whole group, this node included: two data nodes and
	// an optional witness (or any odd number of voters).
	Members []MemberConfig
	Raft    RaftConfig
	API     SiteAPIConfig
	Central CentralLinkConfig
	Metrics MetricsConfig
	Log     LogConfig
	// Targets are the external systems and database connections that
	// scripts' cached calls and writes go to (record settings
	// external_systems and database_connections).
	Targets opgateway.Config

	// ConfigDir is the configuration file's directory, against which
	// relative file: references and CA files resolve; empty (no file) is
	// the working directory. The loader sets it.
	ConfigDir string
}

// MemberConfig is one node of the group, an entry of the record setting
// members (its yaml tags are its keys).
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
	Bind string
	// TLS encrypts and authenticates Raft traffic: every node presents Cert,
	// whose CN (or a DNS name) is its member id, and checks the others'
	// against CA. Required when a Raft address is off loopback, and with
	// api.tls in a group of more than one member. The nodes also present
	// Cert to each other's site API when they pass calls on (both ways: a
	// follower passes a call on only to a leader whose certificate CA
	// verifies and which names a member).
	TLS TLSFiles
}

// SiteAPIConfig configures the site API scripts call.
type SiteAPIConfig struct {
	// Listen is the address to listen on when it differs from the member's
	// api address.
	Listen string
	// Token, when set, authenticates a caller that presents it (a
	// reference, env:NAME or file:/path).
	Token string
	// TLS serves the API over TLS with Cert and Key; CA, when set, verifies
	// scripts' client certificates, each of which then authenticates its
	// caller. Off loopback TLS is required, and a token or CA with it.
	TLS TLSFiles
	// Limits bound what callers can make the API spend: each caller's
	// rate (its certificate's CN, else its address), the connections, the
	// calls one connection runs at once, and the request size, which 0
	// derives from forward.max_subject_bytes and forward.max_body_bytes
	// (requestLimits).
	Limits siteapi.Limits
}

// CentralLinkConfig says how the node reaches central.
type CentralLinkConfig struct {
	// Addr is central's link address (host:port): one central node, or a
	// host name whose addresses are all central nodes. Addr or Addrs is
	// required.
	Addr string
	// Addrs are the link addresses of several central nodes sharing one
	// database, instead of Addr: the node forwards to the first that
	// answers and moves to the next when it fails.
	Addrs []string
	// Token is this site's token at central (a reference).
	Token string
	// TLS: CA verifies central's certificate; Cert and Key, when set, are
	// this site's client certificate (its CN the site id).
	TLS TLSFiles
}

// MetricsConfig configures the Prometheus endpoint.
type MetricsConfig struct {
	// Listen is the address of /metrics; empty serves none.
	Listen string
}

// siteSettings is every setting of a site node, declared as
// centralSettings are.
var siteSettings = []settings.Setting[SiteConfig]{
	setting("site", "OUTBOX_SITE", "site", "site `id` stamped on every notification", func(c *SiteConfig) any { return &c.Core.Site }),
	setting("node", "OUTBOX_SITE_NODE", "node", "this node's `id`, one of members", func(c *SiteConfig) any { return &c.Node }),
	setting("data_dir", "OUTBOX_DATA_DIR", "data-dir", "`directory` of the node's Raft log and buffer", func(c *SiteConfig) any { return &c.DataDir }),
	setting("members", "", "", "the group's nodes, this one included", func(c *SiteConfig) any { return &c.Members }),
	setting("raft.bind", "", "", "address to listen on for Raft when it differs from the member's", func(c *SiteConfig) any { return &c.Raft.Bind }),
	setting("raft.tls", "", "", "mutual TLS between the nodes", func(c *SiteConfig) any { return &c.Raft.TLS }),
	setting("api.listen", "", "", "address to listen on for the site API when it differs from the member's", func(c *SiteConfig) any { return &c.API.Listen }),
	setting("api.token", "OUTBOX_SITE_API_TOKEN", "", "a token that authenticates a caller, as a reference", func(c *SiteConfig) any { return &c.API.Token }),
	setting("api.tls", "", "", "the site API's certificate and key, and the CA of scripts' client certificates", func(c *SiteConfig) any { return &c.API.TLS }),
	setting("api.limits.rate", "", "", "calls a second one caller may make on average", func(c *SiteConfig) any { return &c.API.Limits.Rate }),
	setting("api.limits.burst", "", "", "calls one caller may make at once", func(c *SiteConfig) any { return &c.API.Limits.Burst }),
	setting("api.limits.max_request_bytes", "", "", "largest request read; 0 derives it from the forward limits", func(c *SiteConfig) any { return &c.API.Limits.GRPC.MaxRecvMsgBytes }),
	setting("api.limits.conns_per_address", "", "", "connections open at once from one client address", func(c *SiteConfig) any { return &c.API.Limits.Conns.PerAddress }),
	setting("api.limits.conns_total", "", "", "connections open at once in all", func(c *SiteConfig) any { return &c.API.Limits.Conns.Total }),
	setting("api.limits.max_streams", "", "", "calls one connection runs at once", func(c *SiteConfig) any { return &c.API.Limits.GRPC.MaxConcurrentStreams }),
	setting("api.limits.handshake_timeout", "", "", "bound of a new connection's TLS and HTTP/2 handshake", func(c *SiteConfig) any { return &c.API.Limits.GRPC.HandshakeTimeout }),
	setting("api.limits.idle_timeout", "", "", "a connection without calls for this long is closed", func(c *SiteConfig) any { return &c.API.Limits.GRPC.IdleTimeout }),
	setting("central.addr", "OUTBOX_CENTRAL_ADDR", "central", "central's link `address` host:port", func(c *SiteConfig) any { return &c.Central.Addr }),
	setting("central.addrs", "OUTBOX_CENTRAL_ADDRS", "", "link addresses of several central nodes sharing one database", func(c *SiteConfig) any { return &c.Central.Addrs }),
	setting("central.token", "OUTBOX_CENTRAL_TOKEN", "", "this site's token at central, as a reference", func(c *SiteConfig) any { return &c.Central.Token }),
	setting("central.tls", "", "", "the CA of central's certificate, and this site's client certificate", func(c *SiteConfig) any { return &c.Central.TLS }),
	setting("central.report_interval", "", "", "how often the node reports its health to central", func(c *SiteConfig) any { return &c.Core.ReportInterval }),
	setting("central.telemetry_queue", "", "", "changes of cached operations queued for central at most", func(c *SiteConfig) any { return &c.Core.TelemetryQueue }),
	setting("forward.batch", "", "", "notifications per Submit", func(c *SiteConfig) any { return &c.Core.ForwardBatch }),
	setting("forward.retry_interval", "OUTBOX_FORWARD_RETRY_INTERVAL", "", "wait before forwarding again while central is unreachable", func(c *SiteConfig) any { return &c.Core.RetryInterval }),
	setting("forward.call_timeout", "", "", "bound of one call to central", func(c *SiteConfig) any { return &c.Core.CallTimeout }),
	setting("forward.max_subject_bytes", "", "", "Send refuses a longer subject", func(c *SiteConfig) any { return &c.Core.MaxSubjectBytes }),
	setting("forward.max_body_bytes", "", "", "Send refuses a longer body", func(c *SiteConfig) any { return &c.Core.MaxBodyBytes }),
	setting("external_systems", "", "", "the external systems scripts' cached calls go to", func(c *SiteConfig) any { return &c.Targets.Systems }),
	setting("database_connections", "", "", "the databases scripts' cached writes go to", func(c *SiteConfig) any { return &c.Targets.Connections }),
	setting("operations.max_payload_bytes", "", "", "largest cached call's parameters, or cached write's SQL and arguments", func(c *SiteConfig) any { return &c.Core.MaxOpPayloadBytes }),
	setting("operations.concurrency", "", "", "buffered operations the leader retries at once", func(c *SiteConfig) any { return &c.Core.OpConcurrency }),
	setting("operations.retention", "", "", "how long a finished operation's tracking row is kept", func(c *SiteConfig) any { return &c.Core.OpRetention }),
	setting("operations.purge_interval", "", "", "how often finished tracking rows past the retention are purged", func(c *SiteConfig) any { return &c.Core.OpPurgeInterval }),
	setting("metrics.listen", "OUTBOX_METRICS_LISTEN", "metrics", "`address` of the Prometheus /metrics endpoint", func(c *SiteConfig) any { return &c.Metrics.Listen }),
	setting("log.level", "OUTBOX_LOG_LEVEL", "log-level", "log `level`: debug, info, warn or error", func(c *SiteConfig) any { return &c.Log.Level }),
	setting("log.format", "OUTBOX_LOG_FORMAT", "log-format", "log `format`: auto (text on a terminal, JSON otherwise), text or json", func(c *SiteConfig) any { return &c.Log.Format }),
}

// siteSchema is the configuration of `outbox site`.
var siteSchema = schema[SiteConfig]{
	Schema: settings.Schema[SiteConfig]{
		Defaults: defaultSiteConfig,
		Settings: siteSettings,
		Validate: SiteConfig.Validate,
		Resolve: func(c *SiteConfig, dir string) {
			c.ConfigDir = dir
			c.API.Token = absRef(c.API.Token, dir)
			c.Central.Token = absRef(c.Central.Token, dir)
		},
		Warn: func(l *loaded[SiteConfig]) {
			for _, t := range []struct{ key, v string }{{"api.token", l.Cfg.API.Token}, {"central.token", l.Cfg.Central.Token}} {
				if t.v != "" && !ports.IsSecretRef(t.v) && !strings.HasPrefix(l.Sources[t.key], "env ") {
					l.Warnings = append(l.Warnings, t.key+" is a token in clear ("+l.Sources[t.key]+"); write a reference, env:NAME or file:/path")
				}
			}
		},
	},
	log: func(c SiteConfig) LogConfig { return c.Log },
}

// targetKeys are the keys of the record settings of SiteConfig.Targets.
var targetKeys = map[string]string{"Systems": "external_systems", "Connections": "database_connections"}

// defaultSiteConfig returns the defaults: core's forwarder defaults, the
// site API's limits, info logs in the automatic format.
func defaultSiteConfig() SiteConfig {
	return SiteConfig{
		Core: core.SiteConfig{}.WithDefaults(),
		API:  SiteAPIConfig{Limits: defaultAPILimits()},
		Log:  LogConfig{Level: "info", Format: "auto"},
	}
}

// Validate returns one error per broken rule, joined, or nil: a
// *SettingError, or a *ports.FieldError of core.SiteConfig's own Validate
// that settings.Fields places on its setting.
func (c SiteConfig) Validate() error {
	var r rules
	if err := settings.Fields("Core", c.Core.Validate()); err != nil {
		r = append(r, err)
	}
	targets := c.Targets.WithDefaults()
	if err := settings.RecordFields(targetKeys, reflect.TypeFor[opgateway.Config](),
		errors.Join(targets.Validate(), targets.CheckRefs(secretref.Own(c.ConfigDir)), targets.ResolveRefs(secretref.Own(c.ConfigDir)))); err != nil {
		r = append(r, err)
	}
	if strings.TrimSpace(c.Node) == "" {
		r.Add("node", "required")
	} else if i := strings.IndexFunc(c.Node, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-", c))
	}); i >= 0 || len(c.Node) > 64 {
		r.Add("node", "%q: use at most 64 letters, digits, '.', '_' and '-'", c.Node)
	}
	self := false
	ids, addrs := map[string]bool{}, map[string]string{}
	witnesses := 0
	for i, m := range c.Members {
		key := fmt.Sprintf("members[%d]", i)
		if m.ID == "" {
			r.Add(key+".id", "required")
		} else if ids[m.ID] {
			r.Add(key+".id", "%q is listed twice", m.ID)
		}
		ids[m.ID] = true
		self = self || m.ID == c.Node
		for name, a := range map[string]string{"raft": m.Raft, "api": m.API} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				r.Add(key+"."+name, "%q is not host:port", a)
			} else if prev, dup := addrs[a]; dup {
				r.Add(key+"."+name, "%s is also %s", a, prev)
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
		r.Add("members", "required: the group's nodes, this one included")
	case c.Node != "" && !self:
		r.AddRelated("members", "node", "node %q is not among the members", c.Node)
	case witnesses > 1:
		r.Add("members", "%d witnesses; a group has at most one", witnesses)
	case witnesses == len(c.Members):
		r.Add("members", "a group needs at least one data node besides the witness")
	}
	for key, a := range map[string]string{"raft.bind": c.Raft.Bind, "api.listen": c.API.Listen, "metrics.listen": c.Metrics.Listen} {
		if a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				r.Add(key, "%q is not host:port", a)
			}
		}
	}
	r = append(r, c.offLoopbackRules()...)
	r = append(r, c.validateAPILimits()...)
	r = append(r, c.Raft.TLS.validate("raft.tls", true)...)
	if c.Raft.TLS.set() && c.Raft.TLS.CA == "" {
		r.Add("raft.tls.ca", "required with raft.tls: each node checks the others' certificates")
	}
	r = append(r, c.API.TLS.validate("api.tls", true)...)
	if key, _ := c.offLoopback("raft.bind", c.Raft.Bind, "raft"); key == "" && c.API.TLS.Cert != "" && len(c.Members) > 1 && !c.Raft.TLS.set() {
		r.AddRelated("raft.tls", "api.tls", "required (cert, key and ca) with api.tls in a group of %d members: a follower passes calls, with the scripts' token, to the leader's API only once the leader's Raft certificate proved it a member", len(c.Members))
	}
	r = append(r, c.Central.validateAddrs()...)
	r = append(r, c.Central.TLS.validate("central.tls", false)...)
	if c.Central.Token == "" && c.Central.TLS.Cert == "" {
		r.Add("central", "no credentials: give central.token or a client certificate (central.tls.cert)")
	}
	for _, key := range []string{"api.token", "central.token"} {
		v := map[string]string{"api.token": c.API.Token, "central.token": c.Central.Token}[key]
		if strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "file:") {
			if !ports.IsSecretRef(v) {
				r.Add(key, "%q names no variable or file", v)
			} else {
				// Resolved now, so that every broken reference is named
				// with the other broken rules before the node starts.
				r = append(r, unresolved(key, secretref.Own(c.ConfigDir), v)...)
			}
		}
	}
	r = append(r, c.Log.validate()...)
	return r.Err()
}

// validateAddrs checks central.addr or central.addrs: one of them, each
// address host:port with a port from 1 to 65535, none listed twice, and
// TLS when any is off loopback.
func (l CentralLinkConfig) validateAddrs() rules {
	var r rules
	switch {
	case l.Addr != "" && len(l.Addrs) > 0:
		r.AddRelated("central.addrs", "central.addr", "central.addr is set too: give one central in central.addr or several in central.addrs, not both")
		return r
	case l.Addr == "" && len(l.Addrs) == 0:
		r.Add("central.addr", "required: central's link address host:port (or central.addrs, a list of several centrals)")
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
			r.Add(keys[i], "%q is not host:port", a)
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			r.Add(keys[i], "%q: the port is not a number from 1 to 65535", a)
			continue
		}
		if prev, dup := seen[a]; dup {
			r.Add(keys[i], "%s is also %s", a, prev)
			continue
		}
		seen[a] = keys[i]
		if offKey == "" && !guard.LoopbackHost(host) {
			offKey = keys[i]
		}
	}
	if offKey != "" && !l.TLS.set() {
		r.AddRelated("central.tls", offKey, "required: central %s is not on loopback, and the link must not run in clear", addrs[slices.Index(keys, offKey)])
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
		r.AddRelated("raft.tls", key, "required (cert, key and ca): %s %s is off loopback, and without mutual TLS whoever reaches the Raft port can write to the buffer", key, addr)
	}
	if key, addr := c.offLoopback("api.listen", c.API.Listen, "api"); key != "" {
		if c.API.TLS.Cert == "" || c.API.TLS.Key == "" {
			r.AddRelated("api.tls", key, "required (cert and key): %s %s is off loopback, and tokens and notifications must not cross the network in clear", key, addr)
		}
		if c.API.Token == "" && c.API.TLS.CA == "" {
			r.AddRelated("api", key, "no credentials: %s %s is off loopback; give api.token, or api.tls.ca to take client certificates, or both", key, addr)
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

// defaultAPILimits is the site API's limits, the request size left 0 to be
// derived.
func defaultAPILimits() siteapi.Limits {
	l := siteapi.Limits{}.WithDefaults()
	l.GRPC.MaxRecvMsgBytes = 0
	return l
}

// validateAPILimits checks the API limits as they will run: the request
// size derived when it is 0, and large enough for the largest Send.
func (c SiteConfig) validateAPILimits() rules {
	var r rules
	l := c.requestLimits()
	if err := settings.Fields("API.Limits", l.Validate()); err != nil {
		r = append(r, err)
	}
	f := c.Core
	if need, got := f.MaxSubjectBytes+f.MaxBodyBytes+minSendRoom, l.GRPC.MaxRecvMsgBytes; got > 0 && got < need {
		r.AddRelated("api.limits.max_request_bytes", "forward.max_body_bytes", "%d is below %d, the largest Send forward.max_subject_bytes and forward.max_body_bytes allow (leave it out to derive it)", got, need)
	}
	return r
}

// minSendRoom is what a Send carries besides its subject and body: the id,
// the list and the provenance (200 bytes each at most) and the framing.
const minSendRoom = 4 << 10

// requestLimits returns the site API's limits, a request size of 0 derived
// from the largest Send the forward limits allow.
func (c SiteConfig) requestLimits() siteapi.Limits {
	l := c.API.Limits
	if l.GRPC.MaxRecvMsgBytes == 0 {
		l.GRPC.MaxRecvMsgBytes = siteapi.OpRequestBytes(c.Core.MaxSubjectBytes, c.Core.MaxBodyBytes, c.Core.MaxOpPayloadBytes)
	}
	return l
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
