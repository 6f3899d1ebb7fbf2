package main

// outbox dev: central, a three-voter site group and an SMTP capture in
// one process on loopback, for trying outbox on one machine, like
// `vault server -dev`. It builds the configurations of central and of the
// three site nodes and runs them with the wiring of `outbox central`
// (runCentralNode) and `outbox site` (runSiteNode).

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/siteline/outbox/adapters/devkit/hookcapture"
	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/raftbuffer"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// The well-known addresses of outbox dev. Each one that is taken is
// replaced by a free port, except the page's when -http names it.
const (
	devHTTP = "127.0.0.1:8080"
	devSMTP = "127.0.0.1:2525"
	devLink = "127.0.0.1:7443"
	// devHooks is the webhook capture's address.
	devHooks = "127.0.0.1:8090"
	// devSite is the id of the site group.
	devSite = "dev-site"
	// devAdmin is the admin account's name.
	devAdmin = "admin"
	// devPasswordEnv, when set, is the admin's password instead of a
	// generated one.
	devPasswordEnv = "OUTBOX_DEV_ADMIN_PASSWORD"
	// devRaftAddrsFile, in the data directory, records the Raft addresses
	// the site group was made with: the group's membership lives in its
	// Raft log, so a restart on a kept -data-dir must listen on the same.
	devRaftAddrsFile = "raft-addrs"
	// devLeaderWait bounds the wait for the site's first leader before the
	// addresses are printed.
	devLeaderWait = 30 * time.Second
)

// devNodes are the site group's nodes, on the addresses of
// configs/site-*.yaml. They are three data nodes, not a pair plus a
// witness: on one machine a witness saves nothing, and any of the three may
// lead without a hand-over.
var devNodes = []struct{ id, api, raft string }{
	{"a", "127.0.0.1:7101", "127.0.0.1:7201"},
	{"b", "127.0.0.1:7102", "127.0.0.1:7202"},
	{"c", "127.0.0.1:7103", "127.0.0.1:7203"},
}

// devSiteAddrs is the site API addresses of devNodes, comma-separated: the
// default of `outbox notify -site`.
func devSiteAddrs() string {
	addrs := make([]string, len(devNodes))
	for i, n := range devNodes {
		addrs[i] = n.api
	}
	return strings.Join(addrs, ",")
}

const devSummary = `Runs everything on this machine, in one process, on loopback: central (SQLite,
the built-in channels as plugin processes, the operator page and API), a site
"dev-site" of three Raft nodes that forwards to it, and an SMTP capture that
keeps the e-mail central sends (shown on the page /mail). The list "demo" is
delivered into the capture; "demo-bounce" is refused by it with 550 and parks,
to try Retry and Discard. A webhook capture keeps every HTTP request sent to
it (shown on the page /hooks). It prints the addresses, the admin's password
and commands to try; Ctrl-C stops everything.

To try a channel plugin of your own: -plugins-dir DIR runs every executable
of DIR as the plugin of the channel type named like the file, as central's
plugins.dir does, and -config FILE merges an overlay of central's
configuration over dev's: its lists, channels, plugins and secrets sections
(a list or channel named like dev's replaces it). In the overlay, {{hooks}}
stands for the webhook capture's URL: a list whose targets are
{{hooks}}/anything delivers into the capture.

The data lives in a temporary directory removed at exit, unless -data-dir is
given. The admin's password is generated at each start, unless
OUTBOX_DEV_ADMIN_PASSWORD sets it. The addresses: page 127.0.0.1:8080, SMTP
127.0.0.1:2525, webhook capture 127.0.0.1:8090, site link 127.0.0.1:7443, site
API 127.0.0.1:7101-7103 (the default of outbox notify), Raft
127.0.0.1:7201-7203; one that is taken is replaced by a free port, and a
warning says so.`

// devFlags are the flags of `outbox dev`.
type devFlags struct {
	http      string
	httpSet   bool
	dataDir   string
	freePorts bool
	log       LogConfig
	// pluginsDir and overlay are -plugins-dir and -config.
	pluginsDir string
	overlay    string
}

// runDev is `outbox dev`.
func runDev(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	var f devFlags
	set := flag.NewFlagSet("outbox dev", flag.ContinueOnError)
	set.SetOutput(stderr)
	set.StringVar(&f.http, "http", devHTTP, "loopback `address` of the operator page and API (127.0.0.1:0 picks a free port)")
	set.StringVar(&f.dataDir, "data-dir", "", "keep the data in `directory` (created if missing) instead of a temporary one")
	set.BoolVar(&f.freePorts, "free-ports", false, "listen on free ports instead of the well-known ones (the page too, unless -http is given)")
	set.StringVar(&f.log.Level, "log-level", "info", "log `level`: debug, info, warn or error")
	set.StringVar(&f.log.Format, "log-format", "auto", "log `format`: auto, text or json")
	pluginsDir := set.String("plugins-dir", "", "run every executable of `directory` as a channel plugin, as central's plugins.dir does")
	overlay := set.String("config", "", "merge the lists, channels, plugins and secrets of this central configuration `file` over dev's")
	set.Usage = func() {
		w := set.Output()
		fmt.Fprintf(w, "Usage: outbox dev [flags]\n\n%s\n\nFlags:\n", devSummary)
		set.PrintDefaults()
	}
	if code, ok := cli.ParseArgs(set, args, 0); !ok {
		return code
	}
	set.Visit(func(fl *flag.Flag) { f.httpSet = f.httpSet || fl.Name == "http" })
	f.pluginsDir, f.overlay = *pluginsDir, *overlay
	var r rules
	if f.httpSet {
		if _, _, err := net.SplitHostPort(f.http); err != nil {
			r.Add("-http", "%q is not host:port", f.http)
		} else if !guard.OnLoopback(f.http) {
			r.Add("-http", "%q is not a loopback address: outbox dev listens on loopback only", f.http)
		}
	}
	r = append(r, f.log.validate()...)
	if pw := envValue(environ, devPasswordEnv); pw != "" && (len(pw) < 10 || len(pw) > 72) {
		r.Add(devPasswordEnv, "must be 10 to 72 bytes long, got %d", len(pw))
	}
	if d := f.pluginsDir; d != "" {
		if info, err := os.Stat(d); err != nil {
			r.Add("-plugins-dir", "%v", err)
		} else if !info.IsDir() {
			r.Add("-plugins-dir", "%s is not a directory", d)
		} else if abs, err := filepath.Abs(d); err == nil {
			f.pluginsDir = abs
		}
	}
	if f.overlay != "" {
		// Read now to report its errors before anything starts; dev reads
		// it again once the webhook capture's URL is known.
		if _, err := readDevOverlay(f.overlay, "http://"+devHooks); err != nil {
			r = append(r, unjoin(err)...)
		}
	}
	if err := errors.Join(r...); err != nil {
		printConfigError(stderr, "outbox dev", err)
		return exitUsage
	}
	logger := loggerFor(f.log, stderr, environ)
	if err := dev(ctx, f, environ, stdout, logger); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			logger.Info("outbox dev stopped while starting", "reason", context.Cause(ctx))
			return exitOK
		}
		logger.Error("outbox dev failed", "err", err)
		return exitFailure
	}
	return exitOK
}

// devRun is what outbox dev runs and prints.
type devRun struct {
	// cmd is how the user runs outbox, in the commands printed: see
	// devCommand.
	cmd      string
	dataDir  string
	keep     bool
	password string
	central  centralAddrs
	siteAPIs []string
	// hooks is the webhook capture's URL; lists are the overlay's lists.
	hooks string
	lists []string
}

// dev runs central and the three site nodes until ctx is done, then stops
// the site nodes, then central, and removes the data unless it is kept.
func dev(ctx context.Context, f devFlags, environ []string, stdout io.Writer, logger *slog.Logger) (err error) {
	run := devRun{cmd: devCommand(os.Executable, exec.LookPath), dataDir: f.dataDir, keep: f.dataDir != ""}
	if run.keep {
		if err := os.MkdirAll(run.dataDir, 0o700); err != nil {
			return fmt.Errorf("create -data-dir: %w", err)
		}
	} else {
		if run.dataDir, err = os.MkdirTemp("", "outbox-dev-"); err != nil {
			return fmt.Errorf("create the data directory: %w", err)
		}
		defer func() {
			if rerr := os.RemoveAll(run.dataDir); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the data directory: %w", rerr))
			}
		}()
	}

	// The admin's password and the site's token reach central and the
	// site nodes as file: references; the files go when dev does.
	run.password = envValue(environ, devPasswordEnv)
	if run.password == "" {
		run.password = rand.Text() // 26 letters and digits, easy to copy
	}
	passwordFile := filepath.Join(run.dataDir, "admin.password")
	tokenFile := filepath.Join(run.dataDir, "link.token")
	defer func() {
		for _, p := range []string{passwordFile, tokenFile} {
			if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := os.WriteFile(passwordFile, []byte(run.password), 0o600); err != nil {
		return fmt.Errorf("write the admin's password file: %w", err)
	}
	if err := os.WriteFile(tokenFile, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		return fmt.Errorf("write the site's token file: %w", err)
	}

	// The site nodes' listeners are bound now, so that each member's
	// address is known before any node starts.
	raftLis, apiLis, err := devSiteListeners(run.dataDir, f.freePorts, logger)
	defer func() {
		for _, l := range append(raftLis, apiLis...) {
			_ = l.Close()
		}
	}()
	if err != nil {
		return err
	}

	hooksLis, err := devListen(devHooks, f.freePorts, "the webhook capture", logger)
	if err != nil {
		return fmt.Errorf("webhook capture: %w", err)
	}
	hooks, err := hookcapture.Serve(hooksLis, hookcapture.Config{})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := hooks.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	run.hooks = hooks.URL()

	cfg, err := devCentralConfig(f, run.dataDir, passwordFile, tokenFile, logger)
	if err != nil {
		return err
	}
	if f.overlay != "" || f.pluginsDir != "" {
		if run.lists, err = devOverlay(&cfg, f, run.hooks); err != nil {
			return err
		}
	}

	// Site nodes run under siteCtx, central under its own context, so that
	// at the end the sites stop before central does.
	siteCtx, stopSites := context.WithCancel(ctx)
	defer stopSites()
	centralCtx, stopCentral := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopCentral(nil)
	var (
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		stopSites()
	}

	centralUp := make(chan centralAddrs, 1)
	centralDone := make(chan struct{})
	go func() {
		defer close(centralDone)
		err := runCentralNode(centralCtx, cfg, centralOptions{dev: true, banner: devBanner(run), hooks: hooks,
			started: func(a centralAddrs) { centralUp <- a }}, logger.With("part", "central"))
		if err != nil && !(centralCtx.Err() != nil && errors.Is(err, context.Canceled)) {
			fail(fmt.Errorf("central: %w", err))
		}
		stopSites()
	}()
	var sites sync.WaitGroup
	defer func() {
		stopSites()
		sites.Wait()
		stopCentral(context.Cause(siteCtx))
		<-centralDone
		mu.Lock()
		defer mu.Unlock()
		err = errors.Join(append([]error{err}, errs...)...)
	}()

	select {
	case run.central = <-centralUp:
	case <-siteCtx.Done():
		return nil // a failure is in errs; a signal is a stop
	}

	type nodeUp struct {
		i    int
		api  string
		node *raftbuffer.Node
	}
	up := make(chan nodeUp, len(devNodes))
	for i, sc := range devSiteConfigs(run, cfg.Log, raftLis, apiLis, tokenFile) {
		if err := sc.Validate(); err != nil {
			return fmt.Errorf("site node %s: %w", sc.Node, err)
		}
		opt := siteOptions{raftListener: raftLis[i], apiListener: apiLis[i],
			started: func(api string, node *raftbuffer.Node) { up <- nodeUp{i, api, node} }}
		sites.Go(func() {
			if err := runSiteNode(siteCtx, sc, opt, logger.With("part", "site-"+sc.Node)); err != nil {
				fail(fmt.Errorf("site node %s: %w", sc.Node, err))
			}
		})
	}
	run.siteAPIs = make([]string, len(devNodes))
	var first *raftbuffer.Node
	for range devNodes {
		select {
		case n := <-up:
			run.siteAPIs[n.i] = n.api
			if n.i == 0 {
				first = n.node
			}
		case <-siteCtx.Done():
			return nil
		}
	}
	// Wait for a leader, so that the first Send typed is taken at once.
	wctx, cancel := context.WithTimeout(siteCtx, devLeaderWait)
	leader, werr := first.WaitLeader(wctx)
	cancel()
	switch {
	case siteCtx.Err() != nil:
		return nil
	case werr != nil:
		logger.Warn("the site has no leader yet: Sends wait for one", "err", werr)
	default:
		logger.Info("outbox dev ready", "site_leader", leader, "data_dir", run.dataDir)
	}
	fmt.Fprint(stdout, devAddresses(run))

	<-siteCtx.Done()
	return nil
}

// devCentralConfig returns central's configuration: SQLite in dataDir, the
// built-in channels, the SMTP capture with the email channel pointed at it,
// the lists demo and demo-bounce, the site link and the page.
func devCentralConfig(f devFlags, dataDir, passwordFile, tokenFile string, logger *slog.Logger) (Config, error) {
	httpAddr := f.http
	if !f.httpSet {
		httpAddr = devAddr(devHTTP, f.freePorts, "the operator page", logger)
	}
	// The email channel's settings name the capture's port, so it must be
	// known now: a free port is found, then let go for the capture.
	smtpLis, err := devListen(devSMTP, f.freePorts, "the SMTP capture", logger)
	if err != nil {
		return Config{}, fmt.Errorf("SMTP capture: %w", err)
	}
	smtpAddr := smtpLis.Addr().String()
	_ = smtpLis.Close()
	smtpHost, smtpPort, _ := net.SplitHostPort(smtpAddr)

	cfg := defaultConfig()
	cfg.DataDir = filepath.Join(dataDir, "central")
	cfg.Outbox.NodeID = "dev-central"
	cfg.Log = f.log
	cfg.Lists = []ListConfig{
		{Name: "demo", Type: "email", Targets: []string{"demo@example.com"}},
		{Name: "demo-bounce", Type: "email", Targets: []string{"nobody@bounce.example"}},
	}
	cfg.Channels = []ChannelConfig{{
		Type:     "email",
		Settings: map[string]string{"host": smtpHost, "port": smtpPort, "tls": "none", "from": "outbox-dev@example.com"},
		Retry:    RetryConfig{Backoff: "fixed", MaxRetries: 3, Interval: 10 * time.Second},
	}}
	cfg.SMTPCapture = SMTPCaptureConfig{Addr: smtpAddr, Dir: filepath.Join(dataDir, "mail"), Reject: []string{"@bounce.example"}}
	// Everything here is on loopback, the capture and any demo receiver.
	cfg.Delivery.Network.Allow = []string{"127.0.0.0/8", "::1"}
	cfg.Link.Listen = devAddr(devLink, f.freePorts, "the site link", logger)
	cfg.Link.Sites = []LinkSiteConfig{{ID: devSite, Token: "file:" + tokenFile}}
	cfg.HTTP.Listen = httpAddr
	cfg.HTTP.Admin = AdminConfig{Name: devAdmin, Password: "file:" + passwordFile}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("central's configuration: %w", err)
	}
	return cfg, nil
}

// devOverlay applies -config and -plugins-dir to central's configuration
// and checks the result. It returns the overlay's lists.
func devOverlay(cfg *Config, f devFlags, hooksURL string) ([]string, error) {
	var lists []string
	if f.overlay != "" {
		ov, err := readDevOverlay(f.overlay, hooksURL)
		if err != nil {
			return nil, fmt.Errorf("-config: %w", err)
		}
		lists = applyDevOverlay(cfg, ov)
	}
	if f.pluginsDir != "" {
		cfg.Plugins.Dir = f.pluginsDir
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("central's configuration with -config and -plugins-dir: %w", err)
	}
	return lists, nil
}

// devSiteConfigs returns the configurations of the site nodes, their
// members on the listeners' addresses.
func devSiteConfigs(run devRun, log LogConfig, raftLis, apiLis []net.Listener, tokenFile string) []SiteConfig {
	members := make([]MemberConfig, len(devNodes))
	for i, n := range devNodes {
		members[i] = MemberConfig{ID: n.id, Raft: raftLis[i].Addr().String(), API: apiLis[i].Addr().String()}
	}
	out := make([]SiteConfig, len(devNodes))
	for i, n := range devNodes {
		sc := defaultSiteConfig()
		sc.Core.Site = devSite
		sc.Node = n.id
		sc.DataDir = filepath.Join(run.dataDir, "site-"+n.id)
		sc.Members = members
		sc.Central = CentralLinkConfig{Addr: run.central.Link, Token: "file:" + tokenFile}
		sc.Log = log
		out[i] = sc
	}
	return out
}

// devSiteListeners binds the Raft and site API listeners of the site nodes.
// Raft addresses recorded in dataDir by an earlier run are required, since
// the group's membership names them; otherwise they are recorded.
func devSiteListeners(dataDir string, free bool, logger *slog.Logger) (raftLis, apiLis []net.Listener, err error) {
	path := filepath.Join(dataDir, devRaftAddrsFile)
	var recorded []string
	switch b, err := os.ReadFile(path); {
	case err == nil:
		recorded = strings.Fields(string(b))
		if len(recorded) != len(devNodes) {
			return nil, nil, fmt.Errorf("%s: want %d addresses, found %d", path, len(devNodes), len(recorded))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("read the site's Raft addresses: %w", err)
	}
	var addrs []string
	for i, n := range devNodes {
		var l net.Listener
		if recorded != nil {
			if l, err = net.Listen("tcp", recorded[i]); err != nil {
				return raftLis, apiLis, fmt.Errorf("site node %s: the group in %s was made with Raft address %s: free it, or give another -data-dir: %w",
					n.id, dataDir, recorded[i], err)
			}
		} else if l, err = devListen(n.raft, free, "site node "+n.id+"'s Raft", logger); err != nil {
			return raftLis, apiLis, fmt.Errorf("site node %s: Raft: %w", n.id, err)
		}
		raftLis = append(raftLis, l)
		addrs = append(addrs, l.Addr().String())
		if l, err = devListen(n.api, free, "site node "+n.id+"'s API", logger); err != nil {
			return raftLis, apiLis, fmt.Errorf("site node %s: site API: %w", n.id, err)
		}
		apiLis = append(apiLis, l)
	}
	if recorded == nil {
		if err := os.WriteFile(path, []byte(strings.Join(addrs, "\n")+"\n"), 0o600); err != nil {
			return raftLis, apiLis, fmt.Errorf("record the site's Raft addresses: %w", err)
		}
	}
	return raftLis, apiLis, nil
}

// devListen listens on want, or on a free loopback port when free is set or
// want is taken (which it logs, naming what).
func devListen(want string, free bool, what string, logger *slog.Logger) (net.Listener, error) {
	if !free {
		l, err := net.Listen("tcp", want)
		if err == nil {
			return l, nil
		}
		logger.Warn("address taken: "+what+" listens on a free port instead (printed below)", "wanted", want, "err", err)
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// devAddr returns want when it is free and free is not set, otherwise a
// free-port address (port 0) for a listener that central binds itself.
func devAddr(want string, free bool, what string, logger *slog.Logger) string {
	l, err := devListen(want, free, what, logger)
	if err != nil {
		return "127.0.0.1:0"
	}
	addr := l.Addr().String()
	_ = l.Close()
	if addr != want {
		return "127.0.0.1:0"
	}
	return want
}

// devBanner is the line the page shows in dev mode.
func devBanner(run devRun) string {
	where := "in a temporary directory removed at exit"
	if run.keep {
		where = "in " + run.dataDir
	}
	return "outbox dev: everything runs in one process on this machine, data " + where +
		"; e-mail goes to the local capture (Mail), never out; requests to " + run.hooks + " to the webhook capture."
}

// devAddresses is the block outbox dev prints once everything runs.
func devAddresses(run devRun) string {
	page := pageURL(run.central.HTTP, false)
	sites := strings.Join(run.siteAPIs, ",")
	siteFlag := ""
	if sites != devSiteAddrs() {
		siteFlag = " -site " + sites
	}
	data := run.dataDir + " (removed at exit)"
	if run.keep {
		data = run.dataDir + " (kept)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
outbox dev is running: central, site %q (three Raft nodes), an SMTP capture and a webhook capture, on loopback.

  Operator page:  %s
  Log in:         %s / %s
  Mail capture:   %smail
  Webhooks:       %[12]s (a list's target {{hooks}}/NAME; shown on %[5]shooks)
  Site API:       %s
  SMTP capture:   %s
  Site link:      %s
  Data:           %s

Try:
  %[10]s notify send%[11]s -list demo -subject hi -body hello          # delivered into the mail capture
  %[10]s notify send%[11]s -list demo-bounce -subject hi -body hello   # refused by the capture: it parks
  %[10]s notify status%[11]s ID
`, devSite, page, devAdmin, run.password, page, sites, run.central.SMTP, run.central.Link, data, run.cmd, siteFlag, run.hooks)
	for _, l := range run.lists {
		fmt.Fprintf(&b, "  %s notify send%s -list %s -subject hi -body hello   # your list\n", run.cmd, siteFlag, l)
	}
	server := strings.TrimSuffix(page, "/")
	if t := run.central.DevToken; t.Secret != "" {
		fmt.Fprintf(&b, `
The operator CLI, with an admin token revoked when outbox dev stops (it expires %s at the latest):
  export OUTBOX_SERVER=%[2]s OUTBOX_TOKEN=%[3]s
  %[4]s notifications list
or as yourself: %[4]s login -server %[2]s -name %[5]s
`, t.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC"), server, t.Secret, run.cmd, devAdmin)
	}
	b.WriteString("\nCtrl-C stops everything.\n\n")
	return b.String()
}

// devCommand returns how to run this binary again in the commands outbox
// dev prints: "outbox" when that name on PATH is this binary, "go run
// ./cmd/outbox" when this is a temporary build of go run (which lives in a
// go-build directory, named exe/outbox), otherwise this binary's own path.
// executable and lookPath are os.Executable and exec.LookPath.
func devCommand(executable func() (string, error), lookPath func(string) (string, error)) string {
	const name = "outbox"
	exe, err := executable()
	if err != nil {
		return name
	}
	if onPath, err := lookPath(name); err == nil && sameFile(exe, onPath) {
		return name
	}
	if filepath.Base(filepath.Dir(exe)) == "exe" && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/outbox"
	}
	if strings.ContainsAny(exe, " '\"$`\\") {
		return "'" + strings.ReplaceAll(exe, "'", `'\''`) + "'"
	}
	return exe
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// devTokenTTL is the lifetime of the admin token outbox dev prints: it is
// revoked when outbox dev stops, and dies within a day if it never does.
const devTokenTTL = 24 * time.Hour

// devToken is the admin token outbox dev prints for the CLI.
type devToken struct {
	Secret    string
	ExpiresAt time.Time
}

// makeDevToken makes outbox dev's admin token (actor "system") and returns
// the function that revokes it. The secret goes to the terminal only: the
// log names the token, never its secret.
func makeDevToken(ctx context.Context, ops *core.Operators, logger *slog.Logger) (devToken, func(), error) {
	secret, t, err := ops.CreateToken(ctx, ports.TokenRequest{Actor: ports.ActorSystem, Name: "outbox-dev-" + strings.ToLower(rand.Text()[:6]),
		Role: ports.RoleAdmin, ExpiresAt: time.Now().Add(devTokenTTL)})
	if err != nil {
		return devToken{}, nil, fmt.Errorf("make the dev admin token: %w", err)
	}
	revoke := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := ops.DeleteToken(rctx, ports.ActorSystem, t.ID); err != nil {
			logger.Warn("could not revoke the dev admin token; it expires by itself", "token", t.Name, "expires_at", t.ExpiresAt, "err", err)
		}
	}
	return devToken{Secret: secret, ExpiresAt: t.ExpiresAt}, revoke, nil
}
