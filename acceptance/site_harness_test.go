package acceptance

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// This file is the harness of the site tests and benchmarks: real site nodes
// (`outbox site` processes built from cmd/outbox), central in this process
// behind a real site link, and the waits they share. Every wait polls a
// condition against a deadline; none stands in for a condition.

// Bounds of the site tests. They are deadlines, not waits.
const (
	// nodeStartTimeout bounds a node's start until its site API answers.
	nodeStartTimeout = time.Minute
	// nodeStopTimeout bounds a graceful stop (SIGTERM).
	nodeStopTimeout = 30 * time.Second
	// leaderTimeout bounds an election.
	leaderTimeout = time.Minute
	// arriveTimeout bounds the forwarding of a backlog to central.
	arriveTimeout = 2 * time.Minute
	// pollEvery is how often a condition is checked.
	pollEvery = 50 * time.Millisecond
)

// Sites central knows in the site tests, and their tokens.
const (
	sitePlant1  = "plant-1"
	tokenPlant1 = "plant-1-token-4f1c2b9e"
	sitePlant2  = "plant-2"
	tokenPlant2 = "plant-2-token-8d07a6c3"
)

var (
	binMu   sync.Mutex
	binDir  string
	binPath = map[bool]string{} // by race detector
	binErr  = map[bool]error{}
)

// outboxBinary builds cmd/outbox once per test binary run, with the race
// detector when race is set, and returns its path. TestMain removes it.
func outboxBinary(t testing.TB, race bool) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPath[race]; ok {
		return p
	}
	if err, ok := binErr[race]; ok {
		t.Fatal(err)
	}
	path, err := buildOutbox(race)
	if err != nil {
		binErr[race] = err
		t.Fatal(err)
	}
	binPath[race] = path
	return path
}

// buildOutbox runs go build; binMu is held.
func buildOutbox(race bool) (string, error) {
	if binDir == "" {
		dir, err := os.MkdirTemp("", "outbox-acceptance-")
		if err != nil {
			return "", fmt.Errorf("make the binaries' directory: %w", err)
		}
		binDir = dir
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go tool: %w", err)
	}
	path := filepath.Join(binDir, "outbox")
	args := []string{"build", "-o"}
	if race {
		path += "-race"
		args = append(args, path, "-race")
	} else {
		args = append(args, path)
	}
	out, err := exec.Command(goTool, append(args, "github.com/siteline/outbox/cmd/outbox")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/outbox (race %t): %w\n%s", race, err, out)
	}
	return path, nil
}

// removeOutboxBinaries removes what outboxBinary built.
func removeOutboxBinaries() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// testBinary is the outbox binary of the tests: with the race detector when
// the tests have it.
func testBinary(t testing.TB) string { return outboxBinary(t, raceEnabled) }

// childEnv is this process's environment without OUTBOX_* variables, so
// that only the config file configures a node.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") {
			env = append(env, kv)
		}
	}
	return env
}

var (
	portMu    sync.Mutex
	portTaken = map[int]bool{}
)

// freeAddr returns a 127.0.0.1 address free at this instant, never handed
// out before in this process. Its port is below the kernel's ephemeral range,
// so no outgoing connection takes it before the node that is to listen on it
// starts, and it is the same address after a restart.
func freeAddr(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if portTaken[p] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		portTaken[p] = true
		return addr
	}
	t.Fatal("no free port found on 127.0.0.1")
	return ""
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return fallback
	}
	if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
		return n
	}
	return fallback
}

// siteNode is one `outbox site` process, started and stopped at will with
// the same configuration. Its output goes to a log file in its directory,
// printed at the end of a failed test.
type siteNode struct {
	t       testing.TB
	g       *siteGroup
	id      string
	witness bool
	raft    string // Raft address
	api     string // site API address
	metrics string // metrics.listen, "" for none
	dir     string // holds config, data and log
	config  string
	log     string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the current process was waited for
	waitErr error
	starts  int
}

// dataDir is the node's data directory.
func (n *siteNode) dataDir() string { return filepath.Join(n.dir, "data") }

// launch starts the process and returns at once.
func (n *siteNode) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !isClosed(n.exited) {
		return fmt.Errorf("node %s is already running", n.id)
	}
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the log of node %s: %w", n.id, err)
	}
	defer f.Close() // the child has its own descriptor
	n.starts++
	fmt.Fprintf(f, "=== %s: start %d of node %s ===\n", time.Now().Format(time.RFC3339Nano), n.starts, n.id)
	cmd := exec.Command(n.g.bin, "site", "-config", n.config)
	cmd.Dir = n.dir
	cmd.Env = childEnv()
	cmd.Stdout = f
	cmd.Stderr = f
	// Should this process die without its cleanups (a test timeout, a
	// kill), the node dies with it. (The signal follows the thread that
	// started the child; Go's runtime ends no thread unless a goroutine
	// exits locked to it, which nothing here does.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %s: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.waitErr = cmd, exited, nil
	// Ends when the process does; kill and the test's cleanup make sure it
	// does and wait for it.
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// start starts the node and waits for its site API to answer. A start that
// fails because a port is taken is tried again once the ports are free.
func (n *siteNode) start() {
	n.t.Helper()
	startNodes(n.t, n)
}

// running reports that the node's process runs.
func (n *siteNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !isClosed(n.exited)
}

// pid is the process id of the node's current process.
func (n *siteNode) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.Process.Pid
}

// kill sends SIGKILL (kill -9) and waits for the process to end.
func (n *siteNode) kill() {
	n.t.Helper()
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil || isClosed(exited) {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(nodeStopTimeout):
		n.t.Fatalf("node %s still runs %s after SIGKILL", n.id, nodeStopTimeout)
	}
}

// stop sends SIGTERM and waits for the process to end; it fails the test
// unless the node stops in time with exit status 0.
func (n *siteNode) stop() {
	n.t.Helper()
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil || isClosed(exited) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(nodeStopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		n.t.Fatalf("node %s did not stop within %s of SIGTERM:\n%s", n.id, nodeStopTimeout, n.tail(40))
	}
	n.mu.Lock()
	err := n.waitErr
	n.mu.Unlock()
	if err != nil {
		n.t.Errorf("node %s stopped with %v after SIGTERM:\n%s", n.id, err, n.tail(40))
	}
}

// tail returns the last k lines of the node's log.
func (n *siteNode) tail(k int) string {
	b, err := os.ReadFile(n.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return fmt.Sprintf("--- last %d lines of node %s's log (%s) ---\n%s", len(lines), n.id, n.log, strings.Join(lines, "\n"))
}

// lastStartLog returns the log since the node's last start.
func (n *siteNode) lastStartLog() string {
	b, _ := os.ReadFile(n.log)
	s := string(b)
	if i := strings.LastIndex(s, "=== "); i >= 0 {
		return s[i:]
	}
	return s
}

// health returns the node's health (one try, 5 s at most).
func (n *siteNode) health() (ports.SiteHealth, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.g.client.Health(ctx, n.api)
}

// waitHealth waits until the node's health satisfies cond.
func (n *siteNode) waitHealth(timeout time.Duration, what string, cond func(ports.SiteHealth) bool) ports.SiteHealth {
	n.t.Helper()
	var last ports.SiteHealth
	waittest.For(n.t, timeout, "node "+n.id+": "+what, func() (bool, string) {
		h, err := n.health()
		if err != nil {
			return false, err.Error()
		}
		last = h
		return cond(h), fmt.Sprintf("%+v", h)
	})
	return last
}

// startNodes launches nodes together (a node may wait for a quorum before
// it answers) and waits for each one's site API to answer.
func startNodes(t testing.TB, nodes ...*siteNode) {
	t.Helper()
	for _, m := range nodes {
		if err := m.launch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range nodes {
		for try := 1; ; try++ {
			err := m.waitReady()
			if err == nil {
				break
			}
			if try < 3 && !m.running() && strings.Contains(m.lastStartLog(), "address already in use") {
				t.Logf("node %s: a port is taken; starting it again once its ports are free", m.id)
				m.waitPortsFree()
				if err := m.launch(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Fatalf("node %s did not start: %v\n%s", m.id, err, m.tail(60))
		}
	}
}

// waitReady waits until the node's site API answers Health, or the process
// ends.
func (n *siteNode) waitReady() error {
	deadline := time.NewTimer(nodeStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	var last error
	for {
		if _, err := n.health(); err == nil {
			return nil
		} else {
			last = err
		}
		select {
		case <-exited:
			n.mu.Lock()
			err := n.waitErr
			n.mu.Unlock()
			return fmt.Errorf("the process ended (%v)", err)
		case <-deadline.C:
			return fmt.Errorf("no answer to Health within %s: %w", nodeStartTimeout, last)
		case <-tick.C:
		}
	}
}

// waitPortsFree waits until the node's addresses can be listened on.
func (n *siteNode) waitPortsFree() {
	n.t.Helper()
	waittest.For(n.t, 30*time.Second, "node "+n.id+"'s ports free", func() (bool, string) {
		for _, a := range []string{n.raft, n.api} {
			l, err := net.Listen("tcp", a)
			if err != nil {
				return false, err.Error()
			}
			_ = l.Close()
		}
		return true, ""
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// siteSpec describes a site group.
type siteSpec struct {
	// Site is the site id in the nodes' config; default plant-1.
	Site string
	// Nodes are the node ids; default a, b and the witness w.
	Nodes []string
	// Witness is the id of the witness among Nodes, "" for none.
	Witness string
	// Token is the central token the nodes present; default plant-1's.
	Token string
	// RetryInterval is forward.retry_interval; default 200ms.
	RetryInterval string
	// Race selects the binary: with the race detector or not.
	Race bool
	// Extra is YAML appended to every node's configuration (the targets
	// of cached operations: external_systems, database_connections).
	Extra string
	// ReportInterval is central.report_interval; default the node's.
	ReportInterval string
	// Metrics gives every node a metrics.listen address (siteNode.metrics).
	Metrics bool
}

// threeVoters is a pair plus a witness, as configs/site-*.yaml.
var threeVoters = siteSpec{Nodes: []string{"a", "b", "w"}, Witness: "w"}

// siteGroup is the nodes of one site and a notify client holding all their
// addresses.
type siteGroup struct {
	t      testing.TB
	site   string
	bin    string
	nodes  []*siteNode
	addrs  string
	client *notify.Client
}

// newSiteGroup writes the configuration of every node of spec, reaching
// central c, and a client for them; it starts nothing. The nodes are killed
// at the end of the test; their logs are printed if it failed, checked for
// data races, and copied to the directory OUTBOX_TEST_SITE_LOGS names, if
// set.
func newSiteGroup(t testing.TB, c *centralLink, spec siteSpec) *siteGroup {
	t.Helper()
	return newSiteGroupAt(t, c.addr, spec)
}

// newSiteGroupAt is newSiteGroup reaching central's site link at
// centralAddr (the real central binary's, say).
func newSiteGroupAt(t testing.TB, centralAddr string, spec siteSpec) *siteGroup {
	t.Helper()
	if spec.Site == "" {
		spec.Site = sitePlant1
	}
	if spec.Nodes == nil {
		spec.Nodes, spec.Witness = threeVoters.Nodes, threeVoters.Witness
	}
	if spec.Token == "" {
		spec.Token = tokenPlant1
	}
	if spec.RetryInterval == "" {
		spec.RetryInterval = "200ms"
	}
	root := t.TempDir()
	tokenFile := filepath.Join(root, "central.token")
	if err := os.WriteFile(tokenFile, []byte(spec.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &siteGroup{t: t, site: spec.Site, bin: outboxBinary(t, spec.Race)}
	var addrs []string
	for _, id := range spec.Nodes {
		n := &siteNode{t: t, g: g, id: id, witness: id == spec.Witness,
			raft: freeAddr(t), api: freeAddr(t), dir: filepath.Join(root, id)}
		n.config = filepath.Join(n.dir, "site.yaml")
		n.log = filepath.Join(n.dir, "node.log")
		if spec.Metrics {
			n.metrics = freeAddr(t)
		}
		g.nodes = append(g.nodes, n)
		addrs = append(addrs, n.api)
	}
	for _, n := range g.nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "site: %s\nnode: %s\ndata_dir: %q\nmembers:\n", spec.Site, n.id, n.dataDir())
		for _, m := range g.nodes {
			fmt.Fprintf(&b, "  - {id: %s, raft: %q, api: %q, witness: %t}\n", m.id, m.raft, m.api, m.witness)
		}
		fmt.Fprintf(&b, "central:\n  addr: %q\n  token: %q\n", centralAddr, "file:"+tokenFile)
		if spec.ReportInterval != "" {
			fmt.Fprintf(&b, "  report_interval: %s\n", spec.ReportInterval)
		}
		if n.metrics != "" {
			fmt.Fprintf(&b, "metrics:\n  listen: %q\n", n.metrics)
		}
		fmt.Fprintf(&b, "forward:\n  retry_interval: %s\n  call_timeout: 5s\n", spec.RetryInterval)
		// The tests and benchmarks send from one address as fast as the
		// group takes them: the per-caller limit is not what they measure.
		fmt.Fprintf(&b, "api:\n  limits: {rate: 1000000, burst: 1000000}\n")
		fmt.Fprintf(&b, "log:\n  level: info\n  format: text\n")
		b.WriteString(spec.Extra)
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.config, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g.addrs = strings.Join(addrs, ",")
	client, err := notify.Dial(g.addrs)
	if err != nil {
		t.Fatal(err)
	}
	g.client = client
	t.Cleanup(func() {
		for _, n := range g.nodes {
			n.kill()
		}
		_ = client.Close()
		keep := os.Getenv("OUTBOX_TEST_SITE_LOGS")
		for _, n := range g.nodes {
			if b, err := os.ReadFile(n.log); err == nil && keep != "" {
				name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + g.site + "-" + n.id + ".log"
				if err := os.WriteFile(filepath.Join(keep, name), b, 0o644); err != nil {
					t.Errorf("keep node %s's log: %v", n.id, err)
				}
			}
			if b, err := os.ReadFile(n.log); err == nil && strings.Contains(string(b), "WARNING: DATA RACE") {
				t.Errorf("node %s's log reports a data race:\n%s", n.id, n.tail(200))
			} else if t.Failed() {
				t.Log(n.tail(40))
			}
		}
	})
	return g
}

// node returns the node with id.
func (g *siteGroup) node(id string) *siteNode {
	g.t.Helper()
	for _, n := range g.nodes {
		if n.id == id {
			return n
		}
	}
	g.t.Fatalf("no node %q", id)
	return nil
}

// startAll starts every node and waits for their site APIs.
func (g *siteGroup) startAll() {
	g.t.Helper()
	startNodes(g.t, g.nodes...)
}

// stopAll stops every running node gracefully, together.
func (g *siteGroup) stopAll() {
	g.t.Helper()
	var wg sync.WaitGroup
	errs := make([]string, len(g.nodes))
	for i, n := range g.nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd == nil || isClosed(exited) {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		wg.Go(func() {
			select {
			case <-exited:
			case <-time.After(nodeStopTimeout):
				_ = cmd.Process.Kill()
				<-exited
				errs[i] = fmt.Sprintf("node %s did not stop within %s of SIGTERM", n.id, nodeStopTimeout)
				return
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.waitErr != nil {
				errs[i] = fmt.Sprintf("node %s stopped with %v after SIGTERM", n.id, n.waitErr)
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			g.t.Errorf("%s\n%s", e, g.nodes[i].tail(40))
		}
	}
}

// leader waits until a running data node, not one of except, reports
// itself the leader, and returns it. A witness that wins an election hands
// leadership to a data node at once, so it is not taken for the leader: a
// test that acted on it would race the hand-over.
func (g *siteGroup) leader(except ...*siteNode) *siteNode {
	g.t.Helper()
	var found *siteNode
	waittest.For(g.t, leaderTimeout, "a leader among the running nodes", func() (bool, string) {
		var seen []string
		for _, n := range g.nodes {
			if !n.running() || containsNode(except, n) {
				continue
			}
			h, err := n.health()
			if err != nil {
				seen = append(seen, n.id+": "+err.Error())
				continue
			}
			seen = append(seen, fmt.Sprintf("%s: %s term %d", n.id, h.Replica.Role, h.Replica.Term))
			if h.Replica.Role == ports.RoleLeader && !n.witness {
				found = n
				return true, ""
			}
		}
		return false, strings.Join(seen, "; ")
	})
	return found
}

// followerOf returns a running data node (not the witness) other than
// leader, or the witness if there is none.
func (g *siteGroup) followerOf(leader *siteNode) *siteNode {
	var witness *siteNode
	for _, n := range g.nodes {
		if n == leader || !n.running() {
			continue
		}
		if !n.witness {
			return n
		}
		witness = n
	}
	return witness
}

// waitBacklog waits until every running node reports a backlog of want.
func (g *siteGroup) waitBacklog(want int64, timeout time.Duration) {
	g.t.Helper()
	for _, n := range g.nodes {
		if n.running() {
			n.waitHealth(timeout, fmt.Sprintf("backlog %d", want), func(h ports.SiteHealth) bool { return h.Backlog == want })
		}
	}
}

// sendAll sends n notifications with subjects prefix-0000, … from callers
// goroutines, each Send with a 30 s deadline, and fails the test on any
// error. It returns the subject of each id.
func (g *siteGroup) sendAll(prefix string, n, callers int) map[string]string {
	g.t.Helper()
	var (
		mu    sync.Mutex
		ids   = make(map[string]string, n)
		first error
		next  = make(chan int)
		wg    sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for i := range next {
				subject := fmt.Sprintf("%s-%04d", prefix, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				id, err := g.client.To("ops").Send(ctx, subject, "Level 93% at 08:00.")
				cancel()
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("send %s: %w", subject, err)
				} else if err == nil {
					ids[id] = subject
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		g.t.Fatal(first)
	}
	if len(ids) != n {
		g.t.Fatalf("%d Sends returned %d distinct ids", n, len(ids))
	}
	return ids
}

func containsNode(ns []*siteNode, n *siteNode) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// centralLink is central in this process: a SQLite store, core's Service
// (its dispatcher does not run: the tests count rows), and the site link
// on a fixed 127.0.0.1 address, stopped and started again at will. It knows
// plant-1 and plant-2, each with its token.
type centralLink struct {
	t     testing.TB
	addr  string
	store *sqlstore.DB
	svc   *core.Service

	mu     sync.Mutex
	srv    *sitelink.Server
	served chan error
}

// newCentral builds central on a fresh SQLite database; its link is down
// until up.
func newCentral(t testing.TB) *centralLink {
	t.Helper()
	return newCentralWith(t, core.Config{})
}

// newCentralWith is newCentral with the core's configuration cfg (the
// sites' stale and disconnected times, the reconciliation's interval).
func newCentralWith(t testing.TB, cfg core.Config) *centralLink {
	t.Helper()
	store := open(t, sqliteBackend.config(t))
	dir, err := memdir.New(testLists, testChannels)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(cfg, core.Deps{Store: store.Notifications(), Audit: store.Notifications(), Directory: dir,
		Channels: ports.ChannelMap{}, SiteCalls: store.SiteCalls(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c := &centralLink{t: t, addr: freeAddr(t), store: store, svc: svc}
	t.Cleanup(c.down)
	return c
}

// up serves the site link on c.addr, the same address every time.
func (c *centralLink) up() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		return
	}
	var lis net.Listener
	waittest.For(c.t, 30*time.Second, "central's address "+c.addr+" free", func() (bool, string) {
		l, err := net.Listen("tcp", c.addr)
		if err != nil {
			return false, err.Error()
		}
		lis = l
		return true, ""
	})
	srv, err := sitelink.NewServer(sitelink.ServerConfig{Central: c.svc, Logger: testLogger(), Sites: []sitelink.Site{
		{ID: sitePlant1, Token: tokenPlant1}, {ID: sitePlant2, Token: tokenPlant2}}})
	if err != nil {
		_ = lis.Close()
		c.t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }() // ends at down's Stop
	c.srv, c.served = srv, served
}

// down stops the site link; calls to central fail until up.
func (c *centralLink) down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return
	}
	c.srv.Stop()
	select {
	case err := <-c.served:
		if err != nil {
			c.t.Errorf("site link: %v", err)
		}
	case <-time.After(nodeStopTimeout):
		c.t.Errorf("site link: Serve did not return within %s of Stop", nodeStopTimeout)
	}
	c.srv, c.served = nil, nil
}

// missing returns the ids central does not hold.
func (c *centralLink) missing(ids []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for len(ids) > 0 {
		chunk := ids[:min(500, len(ids))]
		ids = ids[len(chunk):]
		got, err := c.store.Notifications().Statuses(ctx, "", chunk)
		if err != nil {
			return nil, fmt.Errorf("statuses at central: %w", err)
		}
		for _, id := range chunk {
			if st, ok := got[id]; !ok || st == "" || st == ports.StatusUnknown {
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// awaitAll waits until central holds every id.
func (c *centralLink) awaitAll(ids []string, timeout time.Duration) {
	c.t.Helper()
	waittest.For(c.t, timeout, fmt.Sprintf("all %d notifications at central", len(ids)), func() (bool, string) {
		m, err := c.missing(ids)
		if err != nil {
			return false, err.Error()
		}
		if len(m) > 0 {
			return false, fmt.Sprintf("%d missing, e.g. %s", len(m), m[0])
		}
		return true, ""
	})
}

// count returns the rows of site at central.
func (c *centralLink) count(site string) int64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := c.store.Notifications().Count(ctx, ports.Filter{SourceSite: site})
	if err != nil {
		c.t.Fatalf("count at central: %v", err)
	}
	return n
}

// subjects returns how many rows of site central holds per subject.
func (c *centralLink) subjects(site string) map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make(map[string]int)
	page := ports.PageRequest{Limit: 1000}
	for {
		p, err := c.store.Notifications().Query(ctx, ports.Filter{SourceSite: site}, page)
		if err != nil {
			c.t.Fatalf("query central: %v", err)
		}
		for _, n := range p.Items {
			out[n.Subject]++
		}
		if p.Next == "" {
			return out
		}
		page.After = p.Next
	}
}

// duplicates counts the rows beyond the first of each subject.
func duplicates(rows map[string]int) int {
	d := 0
	for _, n := range rows {
		d += max(0, n-1)
	}
	return d
}

// idsOf returns the keys of m.
func idsOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	return out
}

// isUnavailable reports an error wrapping ports.ErrUnavailable.
func isUnavailable(err error) bool { return errors.Is(err, ports.ErrUnavailable) }

// runOutbox runs the test binary with args to its end and returns its exit
// code and output.
func runOutbox(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runBinary(t, testBinary(t), args...)
}

// runBinary runs the outbox binary bin with args to its end, 2 minutes at
// most, and returns its exit code and output.
func runBinary(t testing.TB, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("outbox %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return code, out.String(), errOut.String()
}

// dirDigest returns a digest of every file under dir: names, sizes, modes
// and contents.
func dirDigest(t testing.TB, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d %s\n", path, info.Size(), info.Mode())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("digest %s: %v", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
