package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/ports"
)

// TestSiteFailsOverToAnotherCentral runs two `outbox central` processes on
// one throwaway PostgreSQL database and an `outbox site` node that lists
// both (central.addrs). Notifications are sent through the site without a
// pause; midway the central the site forwards to is killed with SIGKILL.
// Every notification the site acknowledged must reach central's table (none
// lost), the site must move to the other central within seconds, and every
// one is then delivered, to an SMTP capture in the test counting each
// subject (a delivery the killed central made but could not record may be
// repeated once, by the other after the lease).
func TestSiteFailsOverToAnotherCentral(t *testing.T) {
	dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("OUTBOX_TEST_POSTGRES_DSN is not set (.ci/test.sh sets it)")
	}
	dbDSN := throwawayPostgresDB(t, dsn)
	dir := t.TempDir()
	capture, err := smtpcapture.Start(smtpcapture.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = capture.Close() })
	tokenFile := filepath.Join(dir, "plant-1.token")
	if err := os.WriteFile(tokenFile, []byte("plant-1-failover-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := childEnv("OUTBOX_STORE_DSN="+dbDSN, "OUTBOX_LOG_FORMAT=json")

	// Two central nodes, each with its own link address; a lease short
	// enough that the survivor takes over the killed node's claimed rows
	// within the test.
	_, capturePort, _ := strings.Cut(capture.Addr(), ":")
	links := []string{freeLoopback(t), freeLoopback(t)}
	var centralFiles []string
	for i, link := range links {
		file := filepath.Join(dir, fmt.Sprintf("central-%d.yaml", i+1))
		data := fmt.Sprintf(`
store: {driver: postgres}
outbox: {node_id: central-%d, dispatch_interval: 100ms, delivery_timeout: 5s, claim_lease: 8s}
log: {format: json}
lists:
  - {name: ops, type: email, targets: [ops@example.com]}
channels:
  - {type: email, settings: {host: 127.0.0.1, port: "%s", tls: none, from: outbox@example.com}}
delivery: {network: {allow: [127.0.0.1]}}
link:
  listen: "%s"
  sites: [{id: plant-1, token: "file:%s"}]
`, i+1, capturePort, link, tokenFile)
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		centralFiles = append(centralFiles, file)
	}
	if code, out := runToEnd(t, dir, env, "migrate", "-config", centralFiles[0]); code != 0 {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	centrals := make([]*proc, len(links))
	for i, file := range centralFiles {
		c := start(t, dir, env, "central", "-config", file)
		centrals[i] = c
	}
	for _, c := range centrals {
		c.waitFor(t, `"msg":"central started"`, startTimeout)
	}

	// One site node listing both centrals.
	api := freeLoopback(t)
	siteFile := filepath.Join(dir, "site-a.yaml")
	siteData := fmt.Sprintf(`
site: plant-1
node: a
data_dir: %s
members: [{id: a, raft: "%s", api: "%s"}]
central:
  addrs: ["%s", "%s"]
  token: "file:%s"
log: {format: json}
`, filepath.Join(dir, "site-a"), freeLoopback(t), api, links[0], links[1], tokenFile)
	if err := os.WriteFile(siteFile, []byte(siteData), 0o600); err != nil {
		t.Fatal(err)
	}
	site := start(t, dir, childEnv("OUTBOX_LOG_FORMAT=json"), "site", "-config", siteFile)
	site.waitFor(t, `"msg":"site node started"`, startTimeout)

	client, err := notify.Dial(api)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	// The sender sends total notifications one after the other, and tells
	// when half of them are acknowledged.
	const total = 300
	var (
		mu     sync.Mutex
		sent   = map[string]string{} // id → subject
		sentAt = map[string]time.Time{}
	)
	half := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		defer close(sendErr)
		for i := range total {
			subject := fmt.Sprintf("failover %03d", i)
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			id, err := client.To("ops").Send(ctx, subject, "body")
			cancel()
			if err != nil {
				sendErr <- fmt.Errorf("Send %d: %w", i, err)
				return
			}
			mu.Lock()
			sent[id], sentAt[id] = subject, time.Now()
			mu.Unlock()
			if i+1 == total/2 {
				close(half)
			}
			time.Sleep(5 * time.Millisecond) // a steady stream, across the kill
		}
	}()
	select {
	case <-half:
	case err := <-sendErr:
		t.Fatalf("sending: %v\n%s", err, site.Output())
	case <-time.After(runTimeout):
		t.Fatalf("half the notifications not sent within %s:\n%s", runTimeout, site.Output())
	}

	// Kill the central the site forwards to, and the plugin processes it
	// started (which a killed central leaves behind).
	line := site.waitFor(t, `"msg":"site link: connected to central"`, runTimeout)
	used := jsonLine(t, line)["central"]
	victim := -1
	for i, l := range links {
		if l == used {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("the site connected to %v, not to a central of %v", used, links)
	}
	survivor := 1 - victim
	killCentral(t, centrals[victim])
	killed := time.Now()

	// Every acknowledged notification reaches central's table: poll it
	// from the kill on, while the sender goes on.
	ctx := t.Context()
	store, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverPostgres, DSN: dbDSN}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	storedAt := map[string]time.Time{}
	deadline := time.Now().Add(runTimeout)
	sending := true
	for {
		if sending {
			select {
			case err := <-sendErr:
				if err != nil {
					t.Fatalf("sending: %v\n%s", err, site.Output())
				}
				sending = false
			default:
			}
		}
		mu.Lock()
		var ids []string
		for id := range sent {
			if _, ok := storedAt[id]; !ok {
				ids = append(ids, id)
			}
		}
		mu.Unlock()
		for _, id := range ids {
			if _, err := store.Notifications().Get(ctx, id); err == nil {
				storedAt[id] = time.Now()
			}
		}
		if (!sending && len(ids) == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	site.waitFor(t, `"msg":"site link: moved to another central"`, runTimeout)
	mu.Lock()
	defer mu.Unlock()
	lost := len(sent) - len(storedAt)
	// The failover time: from the kill until the first notification sent
	// after it was stored (observed at the poll's resolution).
	var failover time.Duration
	for id, at := range sentAt {
		if s, ok := storedAt[id]; ok && at.After(killed) && (failover == 0 || s.Sub(killed) < failover) {
			failover = s.Sub(killed)
		}
	}
	warnings := strings.Count(site.Output(), `"level":"WARN","msg":"forward`)
	t.Logf("sent %d, stored %d, lost %d; the first notification sent after the kill was stored %s after it; forwarder warnings: %d",
		len(sent), len(storedAt), lost, failover.Round(time.Millisecond), warnings)
	if lost != 0 {
		t.Fatalf("%d acknowledged notifications never reached central's table\nsite:\n%s", lost, site.Output())
	}
	if failover > 30*time.Second {
		t.Errorf("the first notification sent after the kill was stored %s after it, want within seconds", failover)
	}

	// Every one is delivered, by either central, at most twice.
	for id := range sent {
		for {
			n, err := store.Notifications().Get(ctx, id)
			if err == nil && n.Status == ports.StatusDelivered {
				break
			}
			if time.Now().After(deadline.Add(runTimeout)) {
				t.Fatalf("%s not delivered: %+v, %v\nsurvivor:\n%s", id, n, err, centrals[survivor].Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	count := map[string]int{}
	for _, m := range capture.Messages() {
		subject, _ := m.Parse()
		count[subject]++
	}
	delivered, duplicates := 0, 0
	for _, subject := range sent {
		switch c := count[subject]; {
		case c == 0:
			t.Errorf("%q is Delivered but the capture never received it", subject)
		case c > 2:
			t.Errorf("%q was delivered %d times, want at most twice", subject, c)
		default:
			delivered++
			duplicates += c - 1
		}
	}
	t.Logf("delivered %d of %d, duplicates at the receiver %d", delivered, len(sent), duplicates)

	for _, p := range []*proc{site, centrals[survivor]} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.exitCode(t, stopTimeout); code != 0 {
			t.Errorf("exit %d after SIGTERM:\n%s", code, p.Output())
		}
	}
}
