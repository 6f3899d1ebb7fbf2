package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// writePEM writes a certificate authority's certificate, or a certificate
// and its key, as PEM files in dir.
func writePEM(t *testing.T, dir, name string, cert tls.Certificate) (crt, key string) {
	t.Helper()
	crt, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return crt, key
}

func writeCA(t *testing.T, dir, name string, ca *tlstest.CA) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSiteNodesOverTLS runs three site nodes as outbox site wires them, with
// Raft over mutual TLS and the site API over TLS taking scripts' client
// certificates only: a script with a certificate sends through a follower
// (which presents its Raft certificate to the leader), one without is
// refused.
func TestSiteNodesOverTLS(t *testing.T) {
	dir := t.TempDir()
	siteCA, scripts := tlstest.NewCA(t, "site CA"), tlstest.NewCA(t, "scripts CA")
	siteCAFile, scriptsCAFile := writeCA(t, dir, "site-ca", siteCA), writeCA(t, dir, "scripts-ca", scripts)
	tokenFile := filepath.Join(dir, "central.token")
	if err := os.WriteFile(tokenFile, []byte("central-token"), 0o600); err != nil {
		t.Fatal(err)
	}

	ids := []string{"a", "b", "c"}
	g := startLoopbackGroup(t, ids, func(id string, cfg *SiteConfig) {
		crt, key := writePEM(t, dir, id, siteCA.Issue(t, id))
		apiCrt, apiKey := writePEM(t, dir, id+"-api", siteCA.Issue(t, "site node "+id))
		cfg.Core.Site = "plant-1"
		cfg.Raft.TLS = TLSFiles{Cert: crt, Key: key, CA: siteCAFile}
		cfg.API.TLS = TLSFiles{Cert: apiCrt, Key: apiKey, CA: scriptsCAFile}
		cfg.Central = CentralLinkConfig{Addr: freeLoopback(t), Token: "file:" + tokenFile}
	})
	members, follower, nodes := g.members, g.follower(t), g.nodes

	trust := &tls.Config{RootCAs: siteCA.Pool, MinVersion: tls.VersionTLS12}
	script := trust.Clone()
	script.Certificates = []tls.Certificate{scripts.Issue(t, "oven-watch")}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()

	c, err := notify.Dial(members[follower].API, notify.WithTLS(script))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.To("ops").Send(sctx, "Oven 3", "too hot")
	if err != nil {
		t.Fatalf("Send with a script certificate through follower %s: %v", ids[follower], err)
	}

	anon, err := notify.Dial(members[follower].API, notify.WithTLS(trust))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.To("ops").Send(sctx, "Oven 3", "too hot"); !errors.Is(err, ports.ErrUnauthenticated) {
		t.Fatalf("Send without a certificate: %v, want ErrUnauthenticated", err)
	}
	// Every node ends up holding it.
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, n := range nodes {
		waittest.For(t, 30*time.Second, fmt.Sprintf("node %s to hold %s", ids[i], id), func() (bool, string) {
			got, err := n.Contains(sctx, []string{id})
			return err == nil && got[id], fmt.Sprint(err)
		})
	}
}

// TestDevSiteStaysOnLoopback: outbox dev's site runs without TLS or
// credentials, which its configuration allows only because every address it
// binds or dials is on loopback.
func TestDevSiteStaysOnLoopback(t *testing.T) {
	dir := t.TempDir()
	raftLis, apiLis, err := devSiteListeners(dir, true, slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		for _, l := range append(raftLis, apiLis...) {
			_ = l.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	run := devRun{dataDir: dir, central: centralAddrs{Link: "127.0.0.1:7443"}}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("the site's token"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sc := range devSiteConfigs(run, LogConfig{Level: "info", Format: "auto"}, raftLis, apiLis, filepath.Join(dir, "token")) {
		if err := sc.Validate(); err != nil {
			t.Errorf("dev node %s: %v", sc.Node, err)
		}
		if sc.Raft.TLS.set() || sc.API.TLS.set() || sc.API.Token != "" {
			t.Errorf("dev node %s has TLS or a token: %+v", sc.Node, sc)
		}
		for _, m := range sc.Members {
			if !guard.OnLoopback(m.Raft) || !guard.OnLoopback(m.API) {
				t.Errorf("dev member %+v is off loopback", m)
			}
		}
		// The same node reachable from the network would be refused.
		sc.Raft.Bind = "0.0.0.0:0"
		if err := sc.Validate(); err == nil {
			t.Errorf("dev node %s bound to every interface in clear was accepted", sc.Node)
		}
	}
}
