package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/siteapi"
)

// loadSite runs the site loader as `outbox site` would, with yamlText as the
// -config file.
func loadSite(t *testing.T, yamlText string, env map[string]string, args ...string) (*loaded[SiteConfig], error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	// The tokens validSite and the cases reference resolve at load.
	t.Setenv("PLANT_TOKEN", "the plant's token")
	t.Setenv("SITE_API_TOKEN", "the scripts' token")
	var cl commandLine
	fs := siteSchema.flagSet("outbox site", &cl, io.Discard)
	if err := fs.Parse(append([]string{"-config", file}, args...)); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	return siteSchema.load(cl, environ)
}

const validSite = `
site: plant-1
node: a
members:
  - {id: a, raft: 127.0.0.1:7201, api: 127.0.0.1:7101}
  - {id: b, raft: 127.0.0.1:7202, api: 127.0.0.1:7102}
  - {id: w, raft: 127.0.0.1:7203, api: 127.0.0.1:7103, witness: true}
central:
  addr: 127.0.0.1:7443
  token: env:PLANT_TOKEN
`

func TestSiteExampleConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "configs", "site-*.yaml"))
	if err != nil || len(files) != 3 {
		t.Fatalf("found %v (%v), want site-a, site-b and site-w", files, err)
	}
	nodes := map[string]bool{}
	for _, f := range files {
		l, err := siteSchema.load(commandLine{File: f}, nil)
		if err != nil {
			t.Fatalf("%s refused: %v", f, err)
		}
		if len(l.Warnings) != 0 {
			t.Errorf("%s: warnings %v", f, l.Warnings)
		}
		c := l.Cfg
		nodes[c.Node] = true
		rc := c.RaftConfig()
		if rc.NodeID != c.Node || len(rc.Peers) != 3 || rc.Advertise != c.member().Raft || rc.Dir != c.DataDir {
			t.Errorf("%s: raft config %+v", f, rc)
		}
		if cc := c.Core; cc.Site != "plant-1" || cc.Validate() != nil {
			t.Errorf("%s: core config %+v", f, cc)
		}
	}
	if len(nodes) != 3 {
		t.Errorf("the example files name nodes %v, want three different ones", nodes)
	}
}

func TestSiteDefaultsAndOverrides(t *testing.T) {
	l, err := loadSite(t, validSite, map[string]string{"OUTBOX_FORWARD_RETRY_INTERVAL": "250ms"}, "-node", "b")
	if err != nil {
		t.Fatal(err)
	}
	c := l.Cfg
	if c.Node != "b" || c.dataDir() != filepath.Join("data", "site-b") || c.Core.ForwardBatch != 500 ||
		c.Core.RetryInterval.String() != "250ms" || c.apiAddr("w") != "127.0.0.1:7103" {
		t.Errorf("loaded %+v", c)
	}
	if l.Sources["node"] != "flag -node" || l.Sources["forward.retry_interval"] != "env OUTBOX_FORWARD_RETRY_INTERVAL" {
		t.Errorf("sources %v", l.Sources)
	}
}

func TestSiteValidationRules(t *testing.T) {
	cases := map[string]struct {
		yaml string
		env  map[string]string
		want []string
	}{
		"nothing": {yaml: "log: {level: info}\n", want: []string{
			"site: required", "node: required", "members: required", "central.addr: required",
			"central: no credentials"}},
		"node not a member": {yaml: strings.Replace(validSite, "node: a", "node: z", 1),
			want: []string{`members: node "z" is not among the members`}},
		"two witnesses": {yaml: strings.Replace(validSite, "api: 127.0.0.1:7102}", "api: 127.0.0.1:7102, witness: true}", 1),
			want: []string{"members: 2 witnesses"}},
		"duplicate address": {yaml: strings.Replace(validSite, "raft: 127.0.0.1:7202", "raft: 127.0.0.1:7201", 1),
			want: []string{"members[1].raft: 127.0.0.1:7201 is also members[0].raft"}},
		"central off loopback in clear": {yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443", "addr: central.example.com:7443", 1),
			want: []string{"central.tls: required: central central.example.com:7443 is not on loopback"}},
		"central addr and addrs": {yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443", "addr: 127.0.0.1:7443\n  addrs: [127.0.0.1:7444]", 1),
			want: []string{"central.addrs: central.addr is set too: give one central in central.addr or several in central.addrs, not both"}},
		"central addr from the environment and addrs in the file": {
			yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443", "addrs: [127.0.0.1:7443, 127.0.0.1:7444]", 1),
			env:  map[string]string{"OUTBOX_CENTRAL_ADDR": "127.0.0.1:7445"},
			want: []string{"central.addrs: central.addr is set too"}},
		"central addrs broken": {yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443",
			"addrs: [127.0.0.1:7443, 127.0.0.1, ':7444', '127.0.0.1:99999', 'localhost:https', 127.0.0.1:7443]", 1),
			want: []string{`central.addrs[1]: "127.0.0.1" is not host:port`, `central.addrs[2]: ":7444" is not host:port`,
				`central.addrs[3]: "127.0.0.1:99999": the port is not a number from 1 to 65535`,
				`central.addrs[4]: "localhost:https": the port is not a number`,
				"central.addrs[5]: 127.0.0.1:7443 is also central.addrs[0]"}},
		"a central of several off loopback in clear": {yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443",
			"addrs: [127.0.0.1:7443, central-b.example.com:7443]", 1),
			want: []string{"central.tls: required: central central-b.example.com:7443 is not on loopback"}},
		"bad token reference": {yaml: strings.Replace(validSite, "token: env:PLANT_TOKEN", "token: 'env:'", 1),
			want: []string{`central.token: "env:" names no variable or file`}},
		"raft tls without ca": {yaml: validSite + "raft:\n  tls: {cert: /nonexistent.crt, key: /nonexistent.key}\n",
			want: []string{"raft.tls.ca: required", "raft.tls.cert: stat /nonexistent.crt"}},
		"bad link to central values": {yaml: strings.Replace(validSite, "addr: 127.0.0.1:7443", "addr: 127.0.0.1:7443\n  report_interval: 1m\n  telemetry_queue: 0", 1),
			want: []string{"central.report_interval: must be between 100ms and 30s (the longest wait central holds a Sync), got 1m0s",
				"central.telemetry_queue: must be positive, got 0"}},
		"bad forward values": {yaml: validSite + "forward: {batch: 0, retry_interval: -1s}\n",
			want: []string{"forward.batch: must be positive", "forward.retry_interval: must be positive"}},
		"bad site id": {yaml: strings.Replace(validSite, "site: plant-1", "site: 'plant 1'", 1),
			want: []string{`site: "plant 1": use at most 64 letters`}},
		"raft off loopback in clear": {yaml: strings.ReplaceAll(validSite, "raft: 127.0.0.1", "raft: 10.0.0.1"),
			want: []string{"raft.tls: required (cert, key and ca): members[0].raft 10.0.0.1:7201 is off loopback, and without mutual TLS whoever reaches the Raft port can write to the buffer"}},
		"raft bound to every interface in clear": {yaml: validSite + "raft: {bind: '0.0.0.0:7201'}\n",
			want: []string{"raft.tls: required (cert, key and ca): raft.bind 0.0.0.0:7201 is off loopback"}},
		"raft off loopback with tls but no ca": {yaml: strings.ReplaceAll(validSite, "raft: 127.0.0.1", "raft: site-a.plant") +
			"raft:\n  tls: {cert: /nonexistent.crt, key: /nonexistent.key}\n",
			want: []string{"raft.tls: required (cert, key and ca): members[0].raft site-a.plant:7201 is off loopback", "raft.tls.ca: required"}},
		"api off loopback in clear without credentials": {yaml: validSite + "api: {listen: ':7101'}\n",
			want: []string{"api.tls: required (cert and key): api.listen :7101 is off loopback, and tokens and notifications must not cross the network in clear",
				"api: no credentials: api.listen :7101 is off loopback; give api.token, or api.tls.ca to take client certificates, or both"}},
		"a member's api off loopback": {yaml: strings.Replace(validSite, "api: 127.0.0.1:7103", "api: 192.168.1.3:7103", 1),
			want: []string{"api.tls: required (cert and key): members[2].api 192.168.1.3:7103 is off loopback", "api: no credentials"}},
		"api over tls in a group whose raft runs in clear": {yaml: validSite + "api:\n  token: env:SITE_API_TOKEN\n  tls: {cert: /nonexistent.crt, key: /nonexistent.key}\n",
			want: []string{"raft.tls: required (cert, key and ca) with api.tls in a group of 3 members: a follower passes calls, with the scripts' token, to the leader's API only once the leader's Raft certificate proved it a member"}},
		"targets of cached operations": {yaml: validSite + "external_systems:\n  - name: erp\n    base_url: http://erp.plant:8080\n" +
			"    methods: [{name: order, verb: POST, path: orders}]\n    auth: {kind: bearer, token: s3cret}\n" +
			"database_connections:\n  - {name: erp, driver: oracle, dsn: 'postgres://u:pw@h/db'}\n",
			want: []string{"external_systems[0].base_url:", "external_systems[0].methods[0].path:", "external_systems[0].auth.token:",
				"database_connections[0].name:", "database_connections[0].driver:", "database_connections[0].dsn:"}},
		"operations": {yaml: validSite + "operations: {retention: 0s, concurrency: -1, purge_interval: -1m}\n",
			want: []string{"operations.retention: must be positive", "operations.concurrency: must be positive",
				"operations.purge_interval: must be positive"}},
		"api limits": {yaml: validSite + "api:\n  limits: {rate: 0, burst: -1, max_request_bytes: 1000, conns_per_address: 10, conns_total: 5, idle_timeout: 0s}\n",
			want: []string{"api.limits.rate: must be positive, got 0", "api.limits.burst: must be positive, got -1",
				"api.limits.max_request_bytes: 1000 is below 69887, the largest Send", "api.limits.conns_total: 5 is below api.limits.conns_per_address (10)",
				"api.limits.idle_timeout: must be positive"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := loadSite(t, c.yaml, c.env)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSiteOffLoopbackNeedsProtection: a site whose Raft and API addresses
// are on the plant network starts with mutual TLS for Raft and TLS plus a
// credential for the API; each missing piece is refused on its own.
func TestSiteOffLoopbackNeedsProtection(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"node.crt", "node.key", "site-ca.crt", "api.crt", "api.key", "scripts-ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plant := strings.NewReplacer("raft: 127.0.0.1", "raft: 10.0.0.1", "api: 127.0.0.1", "api: 10.0.0.1").Replace(validSite)
	raftTLS := fmt.Sprintf("raft:\n  tls: {cert: %[1]s/node.crt, key: %[1]s/node.key, ca: %[1]s/site-ca.crt}\n", dir)
	apiTLS := fmt.Sprintf("  tls: {cert: %[1]s/api.crt, key: %[1]s/api.key}\n", dir)
	for name, yaml := range map[string]string{
		"token":               plant + raftTLS + "api:\n  token: env:SITE_API_TOKEN\n" + apiTLS,
		"client certificates": plant + raftTLS + "api:\n" + strings.TrimSuffix(apiTLS, "}\n") + ", ca: " + dir + "/scripts-ca.crt}\n",
	} {
		l, err := loadSite(t, yaml, nil)
		if err != nil {
			t.Errorf("%s: a protected site off loopback refused: %v", name, err)
			continue
		}
		if lim := l.Cfg.requestLimits(); lim.Rate != 50 || lim.Burst != 200 || lim.GRPC.MaxRecvMsgBytes != siteapi.RequestBytes(255, 65536) {
			t.Errorf("%s: default limits %+v", name, lim)
		}
	}
	_, err := loadSite(t, plant+raftTLS+"api:\n"+apiTLS, nil)
	if err == nil || !strings.Contains(err.Error(), "api: no credentials") || strings.Contains(err.Error(), "raft.tls") {
		t.Errorf("TLS without a credential: %v", err)
	}
	_, err = loadSite(t, plant+"api:\n  token: env:SITE_API_TOKEN\n"+apiTLS, nil)
	if err == nil || !strings.Contains(err.Error(), "raft.tls: required") || strings.Contains(err.Error(), "api") {
		t.Errorf("Raft in clear: %v", err)
	}
}

// TestSiteCentralAddrs: central.addrs lists several centrals, from the file
// or from OUTBOX_CENTRAL_ADDRS (comma-separated), and the node's link client
// takes them in their order.
func TestSiteCentralAddrs(t *testing.T) {
	several := strings.Replace(validSite, "addr: 127.0.0.1:7443", "addrs:\n    - 127.0.0.1:7443\n    - localhost:7444", 1)
	l, err := loadSite(t, several, map[string]string{"PLANT_TOKEN": "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Cfg.Central.addrs(); !slices.Equal(got, []string{"127.0.0.1:7443", "localhost:7444"}) {
		t.Errorf("central addresses %v", got)
	}
	l, err = loadSite(t, strings.Replace(validSite, "  addr: 127.0.0.1:7443\n", "", 1),
		map[string]string{"OUTBOX_CENTRAL_ADDRS": "127.0.0.1:7443, [::1]:7444"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Cfg.Central.addrs(); !slices.Equal(got, []string{"127.0.0.1:7443", "[::1]:7444"}) ||
		l.Sources["central.addrs"] != "env OUTBOX_CENTRAL_ADDRS" {
		t.Errorf("central addresses %v from %q", got, l.Sources["central.addrs"])
	}
	t.Setenv("PLANT_TOKEN", "tok")
	link, err := dialCentral(l.Cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	if got := link.Addrs(); !slices.Equal(got, []string{"127.0.0.1:7443", "[::1]:7444"}) {
		t.Errorf("the link client's addresses %v", got)
	}
}

func TestSiteWarnsOfATokenInClear(t *testing.T) {
	l, err := loadSite(t, strings.Replace(validSite, "token: env:PLANT_TOKEN", "token: s3cret-token", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "central.token is a token in clear") ||
		strings.Contains(l.Warnings[0], "s3cret") {
		t.Errorf("warnings %v", l.Warnings)
	}
}

// TestSiteNamesEveryBrokenReference: the node's own references resolve at
// load, relative paths against the file's directory: each that does not is
// named with the other broken rules, without a value.
func TestSiteNamesEveryBrokenReference(t *testing.T) {
	yaml := strings.Replace(validSite, "token: env:PLANT_TOKEN", "token: 'file:plant.token'", 1) +
		"api:\n  token: env:OUTBOX_TEST_UNSET_SCRIPT_TOKEN\nlog: {level: loud}\n"
	_, err := loadSite(t, yaml, nil)
	if err == nil {
		t.Fatal("loaded a site whose tokens do not resolve")
	}
	for _, want := range []string{
		"central.token: read file ", "plant.token: no such file or directory",
		"api.token: environment variable OUTBOX_TEST_UNSET_SCRIPT_TOKEN is not set",
		`log.level: unknown level "loud"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
}
