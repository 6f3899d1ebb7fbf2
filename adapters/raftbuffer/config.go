package raftbuffer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/siteline/outbox/adapters/guard"
)

// Peer is one member of the site's Raft group.
type Peer struct {
	// ID names the node; it is the Raft server id.
	ID string
	// Address is host:port where the other nodes reach the node's Raft
	// transport.
	Address string
	// Witness marks the voter that prefers not to lead: it keeps the log and
	// the buffer like any node, and hands leadership over whenever it gets
	// it (see DESIGN.md). At most one peer is a witness.
	Witness bool
}

// Config configures one node. Zero tuning values take the defaults below.
type Config struct {
	// NodeID is this node's id; it must be one of Peers.
	NodeID string
	// Dir holds raft.db (log and stable store), buffer.db (the buffer) and
	// snapshots/. It is created if missing.
	Dir string
	// Bind is the host:port the Raft transport listens on; port 0 picks a
	// free port. Ignored when Listener is set.
	Bind string
	// Advertise is the address the other nodes reach this one at; it
	// defaults to this node's Address in Peers and must equal it when set.
	Advertise string
	// Listener, when set, is used instead of listening on Bind (tests that
	// must know every address before the group starts, socket activation).
	// It serves one Open: Close, or a failed Open, closes it.
	Listener net.Listener
	// Peers is the whole group, this node included. A node without state
	// bootstraps the group with exactly these voters.
	Peers []Peer
	// TLS, when set, makes the transport mutual TLS: the same configuration
	// serves and dials, with Certificates for this node and RootCAs (and
	// ClientCAs, defaulting to RootCAs) for its peers; a peer without a
	// certificate the CAs trust, or whose certificate names no member of
	// Peers (subject CN or a DNS name equal to a peer's ID), is refused both
	// ways. It is required when Bind, the Listener's address or any peer's
	// Address is off loopback: whoever reaches a Raft port in clear can
	// append to and remove from the buffer (see DESIGN.md).
	TLS *tls.Config
	// Logger receives raft's log lines (through adapters/internal/hclogslog);
	// nil means slog.Default().
	Logger *slog.Logger
	// Refusals counts and logs the connections the Raft listener refuses
	// (over its connection bounds, a failed TLS handshake); nil makes one,
	// "site_raft", logging to Logger.
	Refusals *guard.Refusals

	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (default 16384).
	SnapshotThreshold uint64
	// SnapshotInterval is how often the threshold is checked (default 2 min).
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries a snapshot leaves in the log (default
	// 10240), so that a follower a little behind catches up from the log
	// instead of receiving the whole buffer.
	TrailingLogs uint64
	// HeartbeatTimeout (default 1 s), ElectionTimeout (default 1 s) and
	// LeaderLeaseTimeout (default 500 ms, at most HeartbeatTimeout) are
	// raft's timers.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// MaxAppendEntries is the most entries sent, stored and applied at once
	// (default 512, at most 1024).
	MaxAppendEntries int
}

// The defaults of the tuning fields.
const (
	DefaultSnapshotThreshold  = 16384
	DefaultSnapshotInterval   = 2 * time.Minute
	DefaultTrailingLogs       = 10240
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultMaxAppendEntries   = 512
)

// Validate checks the configuration; each broken rule is its own error.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.NodeID == "" {
		bad("raftbuffer: NodeID is empty")
	}
	if c.Dir == "" {
		bad("raftbuffer: Dir is empty")
	}
	if c.Listener == nil {
		if c.Bind == "" {
			bad("raftbuffer: Bind is empty (host:port, port 0 for any)")
		} else if _, _, err := net.SplitHostPort(c.Bind); err != nil {
			bad("raftbuffer: Bind %q is not host:port: %v", c.Bind, err)
		}
	}
	if len(c.Peers) == 0 {
		bad("raftbuffer: Peers is empty; list every node of the group, this one included")
	}
	ids := make(map[string]bool)
	addrs := make(map[string]string)
	witnesses := 0
	var self *Peer
	for i, p := range c.Peers {
		switch {
		case p.ID == "":
			bad("raftbuffer: Peers[%d]: ID is empty", i)
		case ids[p.ID]:
			bad("raftbuffer: Peers[%d]: ID %q is listed twice", i, p.ID)
		}
		ids[p.ID] = true
		if err := checkAddress(p.Address); err != nil {
			bad("raftbuffer: Peers[%d] (%s): Address: %v", i, p.ID, err)
		} else if other, dup := addrs[p.Address]; dup {
			bad("raftbuffer: Peers[%d] (%s): Address %q is also %s's", i, p.ID, p.Address, other)
		} else {
			addrs[p.Address] = p.ID
		}
		if p.Witness {
			witnesses++
		}
		if p.ID == c.NodeID && self == nil {
			self = &c.Peers[i]
		}
	}
	if witnesses > 1 {
		bad("raftbuffer: Peers: %d witnesses; at most one peer may be a witness", witnesses)
	}
	if witnesses == len(c.Peers) && len(c.Peers) > 0 {
		bad("raftbuffer: Peers: the only peer is a witness; a group needs a node that may lead")
	}
	if c.NodeID != "" && len(c.Peers) > 0 && self == nil {
		bad("raftbuffer: NodeID %q is not one of Peers", c.NodeID)
	}
	if c.Advertise != "" {
		if err := checkAddress(c.Advertise); err != nil {
			bad("raftbuffer: Advertise: %v", err)
		} else if self != nil && c.Advertise != self.Address {
			bad("raftbuffer: Advertise %q differs from this node's Address in Peers (%q)", c.Advertise, self.Address)
		}
	}
	if c.TLS == nil {
		for _, a := range c.addresses() {
			if !guard.OnLoopback(a.addr) {
				bad("raftbuffer: %s %q is off loopback and TLS is not set: whoever reaches the Raft port could write to the buffer; set TLS (mutual, with certificates naming the members)", a.what, a.addr)
			}
		}
	}
	if c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil {
		bad("raftbuffer: TLS has no certificate for this node")
	}
	if c.TLS != nil && c.TLS.RootCAs == nil {
		bad("raftbuffer: TLS has no RootCAs to check the peers' certificates")
	}
	if c.MaxAppendEntries < 0 || c.MaxAppendEntries > 1024 {
		bad("raftbuffer: MaxAppendEntries %d is outside 0..1024", c.MaxAppendEntries)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"SnapshotInterval", c.SnapshotInterval}, {"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout}, {"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
	} {
		if d.v < 0 {
			bad("raftbuffer: %s %s is negative", d.name, d.v)
		}
	}
	n := c.withDefaults()
	if n.LeaderLeaseTimeout > n.HeartbeatTimeout {
		bad("raftbuffer: LeaderLeaseTimeout %s is longer than HeartbeatTimeout %s", n.LeaderLeaseTimeout, n.HeartbeatTimeout)
	}
	if n.ElectionTimeout < n.HeartbeatTimeout {
		bad("raftbuffer: ElectionTimeout %s is shorter than HeartbeatTimeout %s", n.ElectionTimeout, n.HeartbeatTimeout)
	}
	return errors.Join(errs...)
}

// address is one network address of a configuration, named for errors.
type address struct{ what, addr string }

// addresses returns the addresses the node listens on or dials: Bind (or
// the Listener's address) and every peer's Address.
func (c Config) addresses() []address {
	var out []address
	switch {
	case c.Listener != nil:
		out = append(out, address{"Listener", c.Listener.Addr().String()})
	case c.Bind != "":
		out = append(out, address{"Bind", c.Bind})
	}
	for i, p := range c.Peers {
		out = append(out, address{fmt.Sprintf("Peers[%d] (%s) Address", i, p.ID), p.Address})
	}
	return out
}

// checkAddress checks a host:port a peer can dial.
func checkAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", a)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is not an address a peer can dial", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has no port between 1 and 65535", a)
	}
	return nil
}

// withDefaults returns c with the zero tuning values replaced.
func (c Config) withDefaults() Config {
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLeaseTimeout == 0 {
		c.LeaderLeaseTimeout = min(DefaultLeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.MaxAppendEntries == 0 {
		c.MaxAppendEntries = DefaultMaxAppendEntries
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Refusals == nil {
		c.Refusals = guard.NewRefusals("site_raft", c.Logger, 0)
	}
	return c
}

// self returns this node's entry in Peers.
func (c Config) self() Peer {
	for _, p := range c.Peers {
		if p.ID == c.NodeID {
			return p
		}
	}
	return Peer{}
}
