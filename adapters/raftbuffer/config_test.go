package raftbuffer

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/internal/hclogslog"
)

func validConfig() Config {
	return Config{
		NodeID: "a",
		Dir:    "/var/lib/outbox/raft",
		Bind:   "0.0.0.0:7000",
		Peers: []Peer{
			{ID: "a", Address: "10.0.0.1:7000"},
			{ID: "b", Address: "10.0.0.2:7000"},
			{ID: "w", Address: "witness.site:7000", Witness: true},
		},
		TLS: &tls.Config{Certificates: []tls.Certificate{{}}, RootCAs: x509.NewCertPool()},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("a valid configuration: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"no node id", func(c *Config) { c.NodeID = "" }, "NodeID is empty"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is empty"},
		{"no bind", func(c *Config) { c.Bind = "" }, "Bind is empty"},
		{"bad bind", func(c *Config) { c.Bind = "7000" }, `Bind "7000" is not host:port`},
		{"no peers", func(c *Config) { c.Peers = nil }, "Peers is empty"},
		{"self not listed", func(c *Config) { c.NodeID = "z" }, `NodeID "z" is not one of Peers`},
		{"duplicate id", func(c *Config) { c.Peers[1].ID = "a" }, `ID "a" is listed twice`},
		{"empty peer id", func(c *Config) { c.Peers[1].ID = "" }, "Peers[1]: ID is empty"},
		{"duplicate address", func(c *Config) { c.Peers[1].Address = "10.0.0.1:7000" }, `is also a's`},
		{"peer without port", func(c *Config) { c.Peers[1].Address = "10.0.0.2" }, "Peers[1] (b): Address"},
		{"peer at port 0", func(c *Config) { c.Peers[1].Address = "10.0.0.2:0" }, "no port between 1 and 65535"},
		{"peer unspecified", func(c *Config) { c.Peers[1].Address = "0.0.0.0:7000" }, "not an address a peer can dial"},
		{"two witnesses", func(c *Config) { c.Peers[1].Witness = true }, "2 witnesses"},
		{"advertise differs", func(c *Config) { c.Advertise = "10.0.0.9:7000" }, "differs from this node's Address"},
		{"tls without certificate", func(c *Config) { c.TLS = &tls.Config{} }, "TLS has no certificate"},
		{"off loopback in clear", func(c *Config) { c.TLS = nil }, `Bind "0.0.0.0:7000" is off loopback and TLS is not set`},
		{"a peer off loopback in clear", func(c *Config) {
			c.TLS, c.Bind = nil, "127.0.0.1:7000"
			c.Peers[0].Address, c.Peers[1].Address = "127.0.0.1:7000", "127.0.0.1:7001"
		}, `Peers[2] (w) Address "witness.site:7000" is off loopback and TLS is not set`},
		{"lease over heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second }, "LeaderLeaseTimeout 2s is longer"},
		{"election under heartbeat", func(c *Config) { c.HeartbeatTimeout = 2 * time.Second; c.LeaderLeaseTimeout = time.Second }, "ElectionTimeout 1s is shorter"},
		{"negative interval", func(c *Config) { c.SnapshotInterval = -time.Second }, "SnapshotInterval -1s is negative"},
		{"too many entries", func(c *Config) { c.MaxAppendEntries = 5000 }, "MaxAppendEntries 5000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.Peers = append([]Peer(nil), c.Peers...)
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigInClearOnLoopbackOnly(t *testing.T) {
	c := validConfig()
	c.TLS, c.Bind = nil, "127.0.0.1:7000"
	c.Peers = []Peer{{ID: "a", Address: "127.0.0.1:7000"}, {ID: "b", Address: "[::1]:7000"}, {ID: "w", Address: "localhost:7002", Witness: true}}
	if err := c.Validate(); err != nil {
		t.Fatalf("a group on loopback in clear: %v", err)
	}
	for _, bind := range []string{":7000", "0.0.0.0:7000", "[::]:7000", "10.0.0.1:7000", "site-a:7000"} {
		c.Bind = bind
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "off loopback and TLS is not set") {
			t.Errorf("Bind %s in clear: Validate = %v", bind, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := validConfig().withDefaults()
	if c.SnapshotThreshold != DefaultSnapshotThreshold || c.TrailingLogs != DefaultTrailingLogs ||
		c.SnapshotInterval != DefaultSnapshotInterval || c.MaxAppendEntries != DefaultMaxAppendEntries ||
		c.HeartbeatTimeout != DefaultHeartbeatTimeout || c.Logger == nil {
		t.Fatalf("defaults not applied: %+v", c)
	}
	rc := raftConfig(c, hclogslog.New(c.Logger))
	if rc.BatchApplyCh || rc.MaxAppendEntries != DefaultMaxAppendEntries || string(rc.LocalID) != "a" {
		t.Fatalf("raft config: BatchApplyCh %v, MaxAppendEntries %d, LocalID %q", rc.BatchApplyCh, rc.MaxAppendEntries, rc.LocalID)
	}
}
