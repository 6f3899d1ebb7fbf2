package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// SecretsConfig says what the secret references of the directory — the
// lists' targets and the channels' settings, which admins change through the
// API and the file seeds — may read. The configuration's own references
// (link.sites[].token, http.admin.password) are the operator's and are not
// limited by it.
type SecretsConfig struct {
	// Dirs are the directories a file: reference may read, each with
	// everything below it (relative ones against the configuration file's
	// directory). None: no file: reference in the directory resolves.
	Dirs []string
	// EnvPrefix is the prefix of the environment variables an env:
	// reference may read. Default OUTBOX_SECRET_. It must not match any
	// variable outbox reads for its own settings (OUTBOX_STORE_DSN, ...).
	EnvPrefix string
}

// ownEnv lists the variables outbox reads for itself besides its settings
// tables: an env: reference must never reach one of them.
var ownEnv = []string{envConfigFile, "OUTBOX_TOKEN", "OUTBOX_SERVER", "OUTBOX_SITE_ADDR", "OUTBOX_DEV_ADMIN_PASSWORD",
	"OUTBOX_TEST_POSTGRES_DSN", "OUTBOX_TEST_MSSQL_DSN"}

// ownVariables returns every variable outbox reads for its own settings.
func ownVariables() []string {
	out := slices.Clone(ownEnv)
	for _, s := range centralSettings {
		if s.Env != "" {
			out = append(out, s.Env)
		}
	}
	for _, s := range siteSettings {
		if s.Env != "" {
			out = append(out, s.Env)
		}
	}
	return out
}

// minEnvPrefix is the shortest secrets.env_prefix: a prefix of a letter or
// two (P, PG) reaches whole families of other software's variables.
const minEnvPrefix = 4

// foreignCredentials are variables other software reads its credentials
// from, which central's environment may well hold (a PostgreSQL client's,
// a cloud SDK's, a CI runner's): secrets.env_prefix must not reach one.
var foreignCredentials = []string{
	"PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "MYSQL_PWD", "MSSQL_SA_PASSWORD", "SQLCMDPASSWORD",
	"REDIS_PASSWORD", "DATABASE_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AZURE_CLIENT_SECRET", "AZURE_STORAGE_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "VAULT_TOKEN",
	"GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "CI_JOB_TOKEN", "NPM_TOKEN", "DOCKER_PASSWORD",
	"DOCKER_AUTH_CONFIG", "KUBECONFIG", "SSH_AUTH_SOCK", "HTTP_PROXY", "HTTPS_PROXY", "SMTP_PASSWORD",
}

func (s SecretsConfig) validate(base string) rules {
	var r rules
	p := s.EnvPrefix
	switch {
	case p == "":
		r.Add("secrets.env_prefix", "empty: give the prefix of the variables env: references may read (default %s); an empty prefix would allow every variable", secretref.DefaultEnvPrefix)
	case strings.IndexFunc(p, func(c rune) bool {
		return !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
	}) >= 0:
		r.Add("secrets.env_prefix", "%q holds a character other than letters, digits and _", p)
	default:
		if len(p) < minEnvPrefix || !strings.HasSuffix(p, "_") {
			r.Add("secrets.env_prefix", "%q must be at least %d characters and end with _ (such as %s), so that it names a family of variables of its own", p, minEnvPrefix, secretref.DefaultEnvPrefix)
		}
		for _, v := range ownVariables() {
			if strings.HasPrefix(v, p) {
				r.Add("secrets.env_prefix", "%q would let a reference read %s, one of outbox's own settings; choose a prefix such as %s", p, v, secretref.DefaultEnvPrefix)
				break
			}
		}
		for _, v := range foreignCredentials {
			if strings.HasPrefix(v, p) {
				r.Add("secrets.env_prefix", "%q would let a reference read %s, another program's credential; choose a prefix such as %s", p, v, secretref.DefaultEnvPrefix)
				break
			}
		}
	}
	for i, d := range s.Dirs {
		key := fmt.Sprintf("secrets.dirs[%d]", i)
		if strings.TrimSpace(d) == "" {
			r.Add(key, "empty")
			continue
		}
		abs := d
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(base, d)
		}
		abs, err := filepath.Abs(abs)
		if err != nil {
			r.Add(key, "%v", err)
			continue
		}
		info, err := os.Stat(abs)
		switch {
		case err != nil:
			r.Add(key, "%s: %v", abs, unwrapPath(err))
		case !info.IsDir():
			r.Add(key, "%s is not a directory", abs)
		case filepath.Dir(abs) == abs:
			r.Add(key, "%s is the root of the file system: every file central can read would be allowed", abs)
		}
	}
	return r
}

// envExposed returns the names of the variables in environ (NAME=value
// entries) that an env: reference may read under prefix, sorted; central
// logs them at start so that the operator sees what the prefix reaches.
func envExposed(prefix string, environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if prefix != "" && strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unwrapPath returns the cause of a *fs.PathError, which repeats the path.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// SecretPolicy is what the directory's references may read: the policy of
// the API, of the configuration's lists and channels at start, and of the
// plugin host at each delivery.
func (c Config) SecretPolicy() secretref.Policy {
	return secretref.Policy{Base: c.ConfigDir, Dirs: c.Secrets.Dirs, EnvPrefix: c.Secrets.EnvPrefix}
}

// validateOwnSecretsOutside refuses a secrets policy that would let the
// directory's references read central's own secrets: the files and
// variables of the configuration's own references, its TLS keys, the SQLite
// database.
func (c Config) validateOwnSecretsOutside() rules {
	own := map[string]string{"http.admin.password": c.HTTP.Admin.Password}
	for i, s := range c.Link.Sites {
		own[fmt.Sprintf("link.sites[%d].token", i)] = s.Token
	}
	files := map[string]string{"link.tls.key": c.Link.TLS.Key, "http.tls.key": c.HTTP.TLS.Key}
	if c.Store.Driver == sqlstore.DriverSQLite {
		dsn, _, _ := strings.Cut(strings.TrimPrefix(c.StoreSettings().DSN, "file:"), "?")
		files["store.dsn (the SQLite database)"] = dsn
	}
	for key, path := range files {
		if path != "" {
			if abs, err := filepath.Abs(path); err == nil {
				own[key] = "file:" + abs
			}
		}
	}
	p := c.SecretPolicy()
	var r rules
	for _, key := range slices.Sorted(maps.Keys(own)) {
		ref := own[key]
		if !ports.IsSecretRef(ref) || p.Check(ref) != nil {
			continue
		}
		if name, ok := strings.CutPrefix(ref, "env:"); ok {
			r.AddRelated("secrets.env_prefix", key, "lets a reference of a list or channel read %s, which %s names: give central's own secrets variables without the prefix", name, key)
		} else {
			r.AddRelated("secrets.dirs", key, "lets a reference of a list or channel read %s, the file of %s: keep central's own secrets out of secrets.dirs", strings.TrimPrefix(ref, "file:"), key)
		}
	}
	return r
}

// validateReferences checks every reference of the configured lists and
// channels against the secrets policy, one SettingError per refusal, with
// what central found (resolved paths, link targets): these errors are the
// operator's, unlike the API's, which name the reference and the rule only.
func (c Config) validateReferences() rules {
	p := c.SecretPolicy()
	var r rules
	for i, l := range c.Lists {
		for k, t := range l.Targets {
			if err := p.Check(t); err != nil {
				r.Add(fmt.Sprintf("lists[%d].targets[%d]", i, k), "%s", secretref.Detail(err))
			}
		}
	}
	for i, ch := range c.Channels {
		for _, k := range slices.Sorted(maps.Keys(ch.Settings)) {
			if err := p.Check(ch.Settings[k]); err != nil {
				r.Add(fmt.Sprintf("channels[%d].settings.%s", i, k), "%s", secretref.Detail(err))
			}
		}
	}
	return r
}

// validateOwnResolvable resolves the configuration's own references
// (http.admin.password, link.sites[].token; relative paths against the
// file's directory) and reports each that does not resolve — a missing or
// unreadable file, an unset variable — so that every broken one is named at
// once with the other broken rules, before anything starts. The errors name
// the reference and what central found, never a value; the values read are
// dropped.
func (c Config) validateOwnResolvable() rules {
	var r rules
	own := secretref.Own(c.ConfigDir)
	r = append(r, unresolved("http.admin.password", own, c.HTTP.Admin.Password)...)
	for i, s := range c.Link.Sites {
		r = append(r, unresolved(fmt.Sprintf("link.sites[%d].token", i), own, s.Token)...)
	}
	return r
}

// unresolvedDirectory resolves the references of the configured lists and
// channels that the secrets policy allows and returns a warning for each
// that does not resolve. They are not errors: the policy allows a file
// that is not there yet, and the API may change the list or channel; until
// they resolve, the deliveries that need them park, naming the reference.
func (c Config) unresolvedDirectory() []string {
	if len(c.Secrets.validate(c.ConfigDir)) > 0 {
		return nil
	}
	p := c.SecretPolicy()
	var r rules
	check := func(key, ref string) {
		if p.Check(ref) == nil {
			r = append(r, unresolved(key, p, ref)...)
		}
	}
	for i, l := range c.Lists {
		for k, t := range l.Targets {
			check(fmt.Sprintf("lists[%d].targets[%d]", i, k), t)
		}
	}
	for i, ch := range c.Channels {
		for _, k := range slices.Sorted(maps.Keys(ch.Settings)) {
			check(fmt.Sprintf("channels[%d].settings.%s", i, k), ch.Settings[k])
		}
	}
	out := make([]string, len(r))
	for i, e := range r {
		out[i] = e.Error() + " (its deliveries park until it resolves)"
	}
	return out
}

// unresolved returns the rule that ref, a reference at key, breaks when p
// cannot resolve it, or none. The value read is dropped.
func unresolved(key string, p secretref.Policy, ref string) rules {
	var r rules
	if err := p.Unresolved(ref); err != nil {
		r.Add(key, "%v", err)
	}
	return r
}

// absRef returns the reference v with a relative file: path made absolute
// against dir; anything else as it is.
func absRef(v, dir string) string {
	path, ok := strings.CutPrefix(v, "file:")
	if !ok || !ports.IsSecretRef(v) || filepath.IsAbs(path) || strings.TrimSpace(path) != path {
		return v
	}
	return "file:" + filepath.Join(dir, path)
}

// policedDirectory is the directory as the operator surface (the API, the
// page, the CLI through the API) sees it: a list or channel holding a
// reference the secrets policy refuses is refused before it is stored,
// with a *ports.FieldError naming the field and the rule (HTTP 400).
type policedDirectory struct {
	ports.DirectoryAdmin
	policy secretref.Policy
}

// PutList implements ports.DirectoryAdmin.
func (d policedDirectory) PutList(ctx context.Context, l ports.List) error {
	if err := d.policy.CheckList(l); err != nil {
		return err
	}
	return d.DirectoryAdmin.PutList(ctx, l)
}

// PutChannel implements ports.DirectoryAdmin.
func (d policedDirectory) PutChannel(ctx context.Context, c ports.ChannelSettings) error {
	if err := d.policy.CheckChannel(c); err != nil {
		return err
	}
	return d.DirectoryAdmin.PutChannel(ctx, c)
}

// checkReferences logs the stored lists and channels (made through the API
// before the policy, or before it changed) holding references the secrets
// policy refuses: their deliveries fail Permanent, naming the reference.
// The configuration's own lists and channels were checked with the rest of
// the configuration.
func checkReferences(ctx context.Context, dir ports.DirectoryAdmin, p secretref.Policy, logger *slog.Logger) error {
	lists, err := dir.Lists(ctx)
	if err != nil {
		return fmt.Errorf("read lists: %w", err)
	}
	for _, l := range lists {
		if err := p.CheckList(l); err != nil {
			logger.Warn("stored list holds a secret reference the configuration does not allow: its notifications will park",
				"list", l.Name, "err", err)
		}
	}
	channels, err := dir.Channels(ctx)
	if err != nil {
		return fmt.Errorf("read channel settings: %w", err)
	}
	for _, c := range channels {
		if err := p.CheckChannel(c); err != nil {
			logger.Warn("stored channel settings hold a secret reference the configuration does not allow: deliveries will park",
				"type", c.Type, "err", err)
		}
	}
	return nil
}
