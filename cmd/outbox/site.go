package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/siteline/outbox/adapters/guard"
	"github.com/siteline/outbox/adapters/metrics"
	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/raftbuffer"
	"github.com/siteline/outbox/adapters/siteapi"
	"github.com/siteline/outbox/adapters/sitelink"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/cmd/outbox/internal/cli"
	"github.com/siteline/outbox/core"
)

const siteSummary = `Run one node of a site's Raft group until SIGINT or SIGTERM: it accepts
Sends from scripts on the site API, keeps them replicated on the group, and
while it leads forwards them to central.

  outbox site -config FILE                  run the node
  outbox site recover -config FILE -yes     make a stopped node the only
                                            member of its group (see README)`

// siteGCPercent is a site node's GOGC unless the environment sets one.
// Its live heap is small (the buffer lives in buffer.db's mapping, not in
// the heap) and each call allocates tens of kilobytes, so at Go's default
// of 100 the collector runs dozens of times a second on a busy leader. At
// 200 it runs half as often: 7-12 % more cached calls a second, for about
// 12 MB more anonymous memory (400 gained a few percent more for 35 MB).
// BenchmarkSiteCachedCall and BenchmarkSiteMemory measure both sides.
const siteGCPercent = 200

// runSite is `outbox site`.
func runSite(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	// A completion probe learns recover, then the flags (setupWith).
	cli.Subcommands(stdout, args, "recover")
	// recover may follow the flags ("outbox site -config F recover"):
	// every flag of a node, and recover's -yes, may come before it. Any
	// other operand is refused by setupWith.
	var cl commandLine
	known := siteSchema.flagSet("outbox site", &cl, io.Discard)
	known.Bool("yes", false, "")
	if sub, rest, err := cli.SplitSubcommand(known, args); err == nil && sub == "recover" {
		return runSiteRecover(rest, environ, stdout, stderr)
	}
	l, logger, code, ok := setupWith(siteSchema, "site", siteSummary, args, environ, stderr)
	if !ok {
		return code
	}
	if envValue(environ, "GOGC") == "" {
		debug.SetGCPercent(siteGCPercent)
	}
	if err := site(ctx, l, logger); err != nil {
		logger.Error("site failed", "err", err)
		return exitFailure
	}
	return exitOK
}

// site wires a site node from its loaded configuration and runs it until
// ctx is done.
func site(ctx context.Context, l *loaded[SiteConfig], logger *slog.Logger) error {
	return runSiteNode(ctx, l.Cfg, siteOptions{configFile: l.File}, logger)
}

// siteOptions are what `outbox dev` changes in a site node.
type siteOptions struct {
	configFile string
	// raftListener and apiListener, when set, are used instead of
	// listening on the configured addresses. The caller closes them after
	// runSiteNode returned (closing one twice is harmless).
	raftListener, apiListener net.Listener
	// started, when set, is called once the node serves, with its site API
	// address and its buffer.
	started func(api string, node *raftbuffer.Node)
}

// runSiteNode wires a site node and runs it until ctx is done: the Raft
// buffer, the link to central, the core, the site API and the metrics.
func runSiteNode(ctx context.Context, cfg SiteConfig, opt siteOptions, logger *slog.Logger) (err error) {
	rc, err := siteRaftConfig(cfg, logger)
	if err != nil {
		return err
	}
	rc.Listener = opt.raftListener
	rc.Refusals = guard.NewRefusals("site_raft", logger.With("component", "raft"), 0)
	node, err := raftbuffer.Open(ctx, rc)
	if err != nil {
		return fmt.Errorf("open the buffer: %w", err)
	}
	defer func() {
		if cerr := node.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close the buffer: %w", cerr))
		}
	}()

	link, err := dialCentral(cfg, logger)
	if err != nil {
		return err
	}
	defer link.Close()

	deps := core.SiteDeps{Buffer: node, Central: link, Logger: logger.With("component", "forwarder")}
	if len(cfg.Targets.Systems)+len(cfg.Targets.Connections) > 0 {
		// Cached calls and writes: the tracking table and retry buffer
		// live in the node's replicated state beside the notifications.
		gw, err := opgateway.New(cfg.Targets, secretref.Own(cfg.ConfigDir),
			opgateway.Options{Logger: logger.With("component", "operations")})
		if err != nil {
			return fmt.Errorf("external_systems, database_connections: %w", err)
		}
		defer gw.Close()
		deps.Ops, deps.Gateway = node, gw
	}
	svc, err := core.NewSite(cfg.Core, deps)
	if err != nil {
		return fmt.Errorf("build the site: %w", err)
	}

	api, err := siteAPIServer(cfg, svc, node, logger)
	if err != nil {
		return err
	}
	refusals := []prometheus.Collector{api.Refusals(), rc.Refusals}
	lis := opt.apiListener
	if lis == nil {
		listen := cfg.API.Listen
		if listen == "" {
			listen = cfg.member().API
		}
		if lis, err = net.Listen("tcp", listen); err != nil {
			return fmt.Errorf("site API: %w", err)
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := api.Serve(lis); err != nil {
			cancel(fmt.Errorf("site API: %w", err))
		}
	})
	// On every node, for as long as it runs: its health to central and,
	// while it leads, the telemetry of cached operations, the operators'
	// commands and the pages of the change feed central asks for.
	wg.Go(func() { svc.Sync(ctx, node.Leads) })
	// While this node leads: the forwarder, and the redelivery and purge
	// of cached operations.
	wg.Go(func() {
		node.Lead(ctx, func(ctx context.Context) {
			var lead sync.WaitGroup
			lead.Go(func() { svc.Forward(ctx) })
			lead.Go(func() { svc.Redeliver(ctx) })
			lead.Go(func() { svc.PurgeOperations(ctx) })
			lead.Wait()
		})
	})
	if cfg.Metrics.Listen != "" {
		h, err := metrics.Handler(append(refusals, metrics.NewSiteCollector(svc, logger),
			metrics.NewSiteLinkCollector(cfg.Core.Site, cfg.Node, func() metrics.LinkCounts { return metrics.LinkCounts(svc.LinkStats()) }))...)
		if err != nil {
			cancel(err)
		} else {
			msrv := &http.Server{Addr: cfg.Metrics.Listen, Handler: h, ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
			wg.Go(func() {
				if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
					cancel(fmt.Errorf("metrics: %w", err))
				}
			})
			context.AfterFunc(ctx, func() { _ = msrv.Close() })
		}
	}
	logger.Info("site node started", "version", versionString(), "site", cfg.Core.Site, "node", cfg.Node,
		"api", lis.Addr().String(), "raft", rc.Advertise, "members", len(cfg.Members),
		"central", strings.Join(cfg.Central.addrs(), ","), "data_dir", rc.Dir, "metrics", cfg.Metrics.Listen, "config_file", opt.configFile)
	if opt.started != nil {
		opt.started(lis.Addr().String(), node)
	}

	<-ctx.Done()
	api.Stop()
	wg.Wait()
	cause := context.Cause(ctx)
	logger.Info("site node stopped", "node", cfg.Node, "reason", cause)
	if errors.Is(cause, context.Canceled) {
		return nil
	}
	return cause
}

// siteRaftConfig returns the buffer's configuration with its TLS and logger.
func siteRaftConfig(cfg SiteConfig, logger *slog.Logger) (raftbuffer.Config, error) {
	rc := cfg.RaftConfig()
	rc.Logger = logger.With("component", "raft")
	if cfg.Raft.TLS.set() {
		t, err := cfg.Raft.TLS.load()
		if err != nil {
			return rc, fmt.Errorf("raft.tls: %w", err)
		}
		rc.TLS = t
	}
	return rc, nil
}

// dialCentral returns the link client to central.
func dialCentral(cfg SiteConfig, logger *slog.Logger) (*sitelink.Client, error) {
	token, err := secretref.Resolve(cfg.Central.Token)
	if err != nil {
		return nil, fmt.Errorf("central.token: %w", err)
	}
	var t *tls.Config
	if cfg.Central.TLS.set() {
		if t, err = cfg.Central.TLS.load(); err != nil {
			return nil, fmt.Errorf("central.tls: %w", err)
		}
	}
	link, err := sitelink.Dial(sitelink.ClientConfig{Addr: cfg.Central.Addr, Addrs: cfg.Central.Addrs, Token: token, TLS: t,
		Logger: logger.With("component", "link")})
	if err != nil {
		return nil, fmt.Errorf("central link: %w", err)
	}
	return link, nil
}

// siteAPIServer builds the site API: it serves svc on the leader and passes
// calls that reach a follower to the leader's API address. Scripts
// authenticate with api.token or a client certificate of api.tls.ca; the
// nodes recognise each other by their Raft certificates (raft.tls), which
// they present to each other when they pass a call on, in both directions.
func siteAPIServer(cfg SiteConfig, svc *core.Site, node *raftbuffer.Node, logger *slog.Logger) (*siteapi.Server, error) {
	token, err := secretref.Resolve(cfg.API.Token)
	if err != nil {
		return nil, fmt.Errorf("api.token: %w", err)
	}
	logger = logger.With("component", "api")
	sc := siteapi.ServerConfig{
		Site: svc,
		Ops:  svc,
		Leader: func() (bool, string) {
			// A witness handing leadership over is the leader Raft knows
			// but refuses writes: it serves nothing, so that it never
			// attempts a cached call whose outcome it could not commit
			// (the call would be attempted again by the next leader).
			id, self := node.Leader()
			return self && node.Leads(), cfg.apiAddr(id)
		},
		Token:    token,
		Limits:   cfg.requestLimits(),
		Refusals: guard.NewRefusals("site_api", logger, 0),
		Logger:   logger,
	}
	for _, m := range cfg.Members {
		sc.Members = append(sc.Members, m.ID)
	}
	if cfg.API.TLS.set() {
		if sc.TLS, err = cfg.API.TLS.load(); err != nil {
			return nil, fmt.Errorf("api.tls: %w", err)
		}
		if sc.ClientCAs, err = readCerts(cfg.API.TLS.CA); err != nil {
			return nil, fmt.Errorf("api.tls.ca: %w", err)
		}
		if cfg.Raft.TLS.set() {
			if sc.MemberCAs, err = readCerts(cfg.Raft.TLS.CA); err != nil {
				return nil, fmt.Errorf("raft.tls.ca: %w", err)
			}
			if sc.PeerTLS, err = sitePeerTLS(cfg); err != nil {
				return nil, err
			}
		}
	}
	srv, err := siteapi.NewServer(sc)
	if err != nil {
		return nil, fmt.Errorf("site API: %w", err)
	}
	return srv, nil
}

// sitePeerTLS is the client configuration a node passes calls on to the
// leader's site API with: it presents the node's Raft certificate (its
// member identity). The site API accepts as the leader only a server whose
// certificate raft.tls.ca verifies and which names a member, whatever the
// system's roots or the scripts' CA would say.
func sitePeerTLS(cfg SiteConfig) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(cfg.Raft.TLS.Cert, cfg.Raft.TLS.Key)
	if err != nil {
		return nil, fmt.Errorf("raft.tls: load certificate %s: %w", cfg.Raft.TLS.Cert, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

// readCerts returns the certificates of a PEM file; none for path "".
func readCerts(path string) ([]*x509.Certificate, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}

// runSiteRecover is `outbox site recover`: with the node stopped, it
// rewrites the node's Raft configuration so that it is the group's only
// member, for a pair that lost a node for good.
func runSiteRecover(args, environ []string, stdout, stderr io.Writer) int {
	var yes bool
	var cl commandLine
	fs := siteSchema.flagSet("outbox site recover", &cl, stderr)
	fs.BoolVar(&yes, "yes", false, "do it: without -yes, only print what it would do and its risk")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: outbox site recover -config FILE -yes\n\n%s\n\nFlags:\n", recoverRisk)
		fs.PrintDefaults()
	}
	// An operand ("outbox site recover b.yaml -yes") is refused before
	// the configuration (-config, else OUTBOX_CONFIG) is loaded: it must
	// never recover another node than the one named.
	if code, ok := cli.ParseArgs(fs, args, 0); !ok {
		return code
	}
	l, err := siteSchema.load(cl, environ)
	if err != nil {
		printConfigError(stderr, "outbox site recover", err)
		return exitUsage
	}
	logger := loggerFor(l.Cfg.Log, stderr, environ)
	rc, err := siteRaftConfig(l.Cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "outbox site recover: %v\n", err)
		return exitUsage
	}
	if !yes {
		fmt.Fprintf(stdout, "outbox site recover would make node %q (data in %s) the only member of site %q's group.\n\n%s\n\nRun again with -yes to do it.\n",
			l.Cfg.Node, rc.Dir, l.Cfg.Core.Site, recoverRisk)
		return exitUsage
	}
	if err := raftbuffer.Recover(rc); err != nil {
		fmt.Fprintf(stderr, "outbox site recover: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "node %q is now the only member of its group: start it with `outbox site -config %s`.\n"+
		"Never start the lost node with its old data. To make a pair again, wait for backlog 0, stop this node,\n"+
		"empty both nodes' data_dir and start both.\n", l.Cfg.Node, l.File)
	return exitOK
}

// recoverRisk is what `outbox site recover` says before it acts.
const recoverRisk = `Use it only when the other data node of a pair is lost for good (and there is
no witness, or the witness is lost too), with this node stopped. The node then
elects itself and accepts Sends again with what it holds: every Send that was
acknowledged is on it, because a pair commits only on both nodes.

The risk is a split brain: if the other node is in fact alive, or is recovered
the same way, the two nodes accept Sends separately and each forwards its own.
Nothing is lost (central de-duplicates by id), but the two buffers never
merge. So run it on one node only, and never start the lost node with its old
data: to make a pair again, wait until this node's backlog is 0, stop it, empty
both nodes' data directories and start both.`
