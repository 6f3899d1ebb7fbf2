package email

import (
	"crypto/sha256"
	"errors"
	"fmt"
	netmail "net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// The names of the settings, as they appear in Request.Settings.
const (
	settingHost           = "host"
	settingPort           = "port"
	settingTLS            = "tls"
	settingAuth           = "auth"
	settingUsername       = "username"
	settingPassword       = "password"
	settingFrom           = "from"
	settingTokenURL       = "token_url"
	settingClientID       = "client_id"
	settingClientSecret   = "client_secret"
	settingScopes         = "scopes"
	settingTLSCAFile      = "tls_ca_file"
	settingTLSServerName  = "tls_server_name"
	settingPoolSize       = "pool_size"
	settingConnectTimeout = "connect_timeout"
)

// The values of the tls setting.
const (
	tlsNone     = "none"
	tlsStartTLS = "starttls"
	tlsImplicit = "implicit"
)

// The values of the auth setting.
const (
	authNone    = "none"
	authPlain   = "plain"
	authLogin   = "login"
	authXOAUTH2 = "xoauth2"
)

const (
	// defaultPoolSize is the most connections a pool opens by default. A
	// connection sends one message after another (a round trip per SMTP
	// command, no pipelining), and central runs 32 deliveries at once: with
	// 4, the whole path (BenchmarkEndToEnd) held p99 <= 1 s up to
	// 1,500-2,000 messages/s on two shared cores; with 16, up to
	// 2,000-3,000/s, where the cores ran out rather than the pool. 16 stays
	// under the usual per-client limits of SMTP servers (Exchange 20,
	// Postfix 50), and the pool opens them only as deliveries wait and
	// closes idle ones, so a quiet channel holds few. DESIGN.md has the
	// figures.
	defaultPoolSize       = 16
	maxPoolSize           = 64
	defaultConnectTimeout = 10 * time.Second
)

// errSettings is wrapped by every error about the settings; such an error is
// Permanent.
var errSettings = errors.New("invalid email settings")

// schema is the settings schema Describe returns.
var schema = []channel.Setting{
	{Name: settingHost, Required: true,
		Description: "Host name or IP address of the SMTP server."},
	{Name: settingPort, Kind: channel.KindNumber, Default: "587 for starttls, 465 for implicit, 25 for none",
		Description: "TCP port of the SMTP server."},
	{Name: settingTLS, Default: tlsStartTLS, Allowed: []string{tlsNone, tlsStartTLS, tlsImplicit},
		Description: "Transport security: none (plain text), starttls (upgrade a plain connection, " +
			"required) or implicit (TLS from the first byte, SMTPS)."},
	{Name: settingAuth, Default: authNone, Allowed: []string{authNone, authPlain, authLogin, authXOAUTH2},
		Description: "SMTP authentication: none, plain, login, or xoauth2 (OAuth2 client credentials). " +
			"plain and login need TLS unless the host is localhost."},
	{Name: settingUsername,
		Description: "User name for plain, login and xoauth2 authentication (for xoauth2, the mailbox)."},
	{Name: settingPassword, Secret: true,
		Description: "Password for plain and login authentication."},
	{Name: settingFrom, Required: true,
		Description: "The From address of every message, also used as the envelope sender."},
	{Name: settingTokenURL,
		Description: "xoauth2: the OAuth2 token endpoint (client credentials grant)."},
	{Name: settingClientID,
		Description: "xoauth2: the OAuth2 client id."},
	{Name: settingClientSecret, Secret: true,
		Description: "xoauth2: the OAuth2 client secret."},
	{Name: settingScopes, Kind: channel.KindList,
		Description: "xoauth2: comma-separated OAuth2 scopes to request."},
	{Name: settingTLSCAFile,
		Description: "PEM file of the CA certificates to trust instead of the system's (a private CA). " +
			"It is read when a connection pool is set up."},
	{Name: settingTLSServerName, Default: "the host",
		Description: "Name expected in the server's certificate."},
	{Name: settingPoolSize, Kind: channel.KindNumber, Default: strconv.Itoa(defaultPoolSize),
		Description: "Most SMTP connections open at once (1 to 64). A connection is opened when a message finds " +
			"none idle and closed after 30 s unused, so the pool grows with the load up to this bound and shrinks " +
			"back. Keep it within the server's limit of connections per client."},
	{Name: settingConnectTimeout, Kind: channel.KindDuration, Default: defaultConnectTimeout.String(),
		Description: "Go duration bounding the connection set-up and every SMTP exchange; " +
			"the delivery's own deadline applies as well."},
}

// config is the parsed form of one Request's settings.
type config struct {
	host           string
	port           int
	tls            string
	auth           string
	username       string
	password       string
	from           *netmail.Address
	tokenURL       string
	clientID       string
	clientSecret   string
	scopes         []string
	caFile         string
	serverName     string
	poolSize       int
	connectTimeout time.Duration
}

// poolKey identifies the connections a config may share. Secrets are in it
// only as a fingerprint.
type poolKey struct {
	host           string
	port           int
	tls            string
	auth           string
	username       string
	caFile         string
	serverName     string
	poolSize       int
	connectTimeout time.Duration
	credentials    [sha256.Size]byte
}

// key returns the config's pool key.
func (c *config) key() poolKey {
	return poolKey{
		host:           c.host,
		port:           c.port,
		tls:            c.tls,
		auth:           c.auth,
		username:       c.username,
		caFile:         c.caFile,
		serverName:     c.serverName,
		poolSize:       c.poolSize,
		connectTimeout: c.connectTimeout,
		credentials:    fingerprint(c.password, c.tokenURL, c.clientID, c.clientSecret, strings.Join(c.scopes, " ")),
	}
}

// tokenKey identifies the OAuth2 client whose tokens a config uses.
func (c *config) tokenKey() [sha256.Size]byte {
	return fingerprint(c.tokenURL, c.clientID, c.clientSecret, strings.Join(c.scopes, " "))
}

// secrets returns the secret values of the config, to be masked in texts.
func (c *config) secrets() []string {
	return []string{c.password, c.clientSecret}
}

// fingerprint hashes the parts, each prefixed with its length so that no two
// different lists hash alike.
func fingerprint(parts ...string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		l := uint64(len(p))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// problems collects what is wrong with the settings. Each problem names its
// setting and never holds its value.
type problems []string

// add records a problem with the setting name.
func (p *problems) add(name, format string, args ...any) {
	*p = append(*p, fmt.Sprintf("setting %q ", name)+fmt.Sprintf(format, args...))
}

// err returns nil or one error wrapping errSettings with every problem.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", strings.Join(p, "; "), errSettings)
}

// parseSettings reads and checks a Request's settings. Its errors wrap
// errSettings and never hold a setting's value.
func parseSettings(s map[string]string) (*config, error) {
	get := func(name string) string { return strings.TrimSpace(s[name]) }
	c := &config{
		host:       get(settingHost),
		tls:        get(settingTLS),
		auth:       get(settingAuth),
		username:   get(settingUsername),
		password:   s[settingPassword], // a password may begin or end with a space
		tokenURL:   get(settingTokenURL),
		clientID:   get(settingClientID),
		caFile:     get(settingTLSCAFile),
		serverName: get(settingTLSServerName),
	}
	c.clientSecret = s[settingClientSecret]

	var errs problems
	if c.host == "" {
		errs.add(settingHost, "is required")
	} else if strings.ContainsAny(c.host, " \t\r\n/@?#") || strings.Count(c.host, ":") == 1 {
		errs.add(settingHost, "must be a host name or an IP address, without a port")
	}
	c.host = strings.TrimSuffix(strings.TrimPrefix(c.host, "["), "]")

	switch c.tls {
	case "":
		c.tls = tlsStartTLS
	case tlsNone, tlsStartTLS, tlsImplicit:
	default:
		errs.add(settingTLS, "must be one of %s, %s, %s", tlsNone, tlsStartTLS, tlsImplicit)
	}

	switch p := get(settingPort); {
	case p != "":
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			errs.add(settingPort, "must be a port number from 1 to 65535")
		}
		c.port = n
	case c.tls == tlsImplicit:
		c.port = 465
	case c.tls == tlsNone:
		c.port = 25
	default:
		c.port = 587
	}

	switch c.auth {
	case "":
		c.auth = authNone
	case authNone:
	case authPlain, authLogin:
		if c.username == "" {
			errs.add(settingUsername, "is required with auth %s", c.auth)
		}
		if strings.TrimSpace(c.password) == "" {
			errs.add(settingPassword, "is required with auth %s", c.auth)
		}
	case authXOAUTH2:
		if c.username == "" {
			errs.add(settingUsername, "is required with auth %s", c.auth)
		}
		if c.tokenURL == "" {
			errs.add(settingTokenURL, "is required with auth %s", c.auth)
		} else if u, err := url.Parse(c.tokenURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs.add(settingTokenURL, "must be an http or https URL")
		}
		if c.clientID == "" {
			errs.add(settingClientID, "is required with auth %s", c.auth)
		}
		if strings.TrimSpace(c.clientSecret) == "" {
			errs.add(settingClientSecret, "is required with auth %s", c.auth)
		}
		for _, scope := range strings.Split(s[settingScopes], ",") {
			if scope = strings.TrimSpace(scope); scope != "" {
				c.scopes = append(c.scopes, scope)
			}
		}
	default:
		errs.add(settingAuth, "must be one of %s, %s, %s, %s", authNone, authPlain, authLogin, authXOAUTH2)
	}
	if c.auth != authXOAUTH2 {
		// Settings of another auth mode do not split the pool.
		c.tokenURL, c.clientID, c.clientSecret = "", "", ""
	}
	if c.auth != authPlain && c.auth != authLogin {
		c.password = ""
	}
	if c.auth == authNone {
		c.username = ""
	}

	if from := get(settingFrom); from == "" {
		errs.add(settingFrom, "is required")
	} else if a, err := netmail.ParseAddress(from); err != nil {
		errs.add(settingFrom, "is not a valid e-mail address")
	} else {
		c.from = a
	}

	c.poolSize = defaultPoolSize
	if p := get(settingPoolSize); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > maxPoolSize {
			errs.add(settingPoolSize, "must be a whole number from 1 to %d", maxPoolSize)
		}
		c.poolSize = n
	}

	c.connectTimeout = defaultConnectTimeout
	if t := get(settingConnectTimeout); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			errs.add(settingConnectTimeout, "must be a positive Go duration such as 10s")
		}
		c.connectTimeout = d
	}

	if c.tls == tlsNone {
		c.caFile, c.serverName = "", ""
	} else if c.serverName == "" {
		c.serverName = c.host
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return c, nil
}
