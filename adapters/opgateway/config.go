package opgateway

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// Defaults of a target's settings, taken by a zero field (WithDefaults).
const (
	// DefaultTimeout bounds one attempt: connecting, sending, and reading
	// the answer (HTTP) or committing the transaction (SQL).
	DefaultTimeout = 30 * time.Second
	// DefaultMaxRetries is how many retries a target's operation gets
	// after its first attempt before it parks.
	DefaultMaxRetries = 10
	// DefaultRetryInterval is the fixed wait between two retries.
	DefaultRetryInterval = time.Minute
	// DefaultMaxConns bounds the open connections of one database
	// connection's pool (SQLite always has one).
	DefaultMaxConns = 4
)

// Bounds on what the configuration may say.
const (
	// MaxNameBytes bounds the name of a system, a method and a connection.
	MaxNameBytes = 200
	// MaxTimeout and MaxRetryInterval bound a target's durations, and
	// MaxMaxRetries its retries: past them a typo, not an intent.
	MaxTimeout       = 10 * time.Minute
	MaxRetryInterval = 7 * 24 * time.Hour
	MaxMaxRetries    = 100_000
	// maxPathBytes bounds a method's path template.
	maxPathBytes = 2048
)

// Config is what a site's configuration defines for its cached
// operations: the external systems scripts call, and the database
// connections they write to. Their names are unique across both, so that
// a target's name alone (a tracking row's, a filter's) says which it is.
type Config struct {
	Systems     []System     `yaml:"systems"`
	Connections []Connection `yaml:"connections"`
}

// System is an external system reached over HTTP.
type System struct {
	// Name is what scripts call it.
	Name string `yaml:"name"`
	// BaseURL is the system's absolute http or https URL; a method's path
	// is appended to it. It holds no user information (use Auth), query
	// nor fragment. http is allowed only to a loopback host unless
	// AllowInsecure says otherwise: a call carries the system's
	// credentials and the script's data.
	BaseURL string `yaml:"base_url"`
	// AllowInsecure allows an http BaseURL off loopback (a plant network
	// whose system speaks no TLS): credentials and data then travel in
	// clear.
	AllowInsecure bool `yaml:"allow_insecure"`
	// CAFile, when set, is a PEM file of the authorities that verify the
	// system's certificate instead of the machine's (a plant's own CA). A
	// relative path starts at the secretref.Policy's Base (the
	// configuration's directory). New reads it.
	CAFile string `yaml:"ca_file"`
	// Methods are the system's methods; their names are unique.
	Methods []Method `yaml:"methods"`
	// Headers are sent with every call, as written. They carry no secret
	// (a reference is refused: a secret header is Auth of kind header) and
	// cannot set what the gateway sets itself (Authorization,
	// Idempotency-Key, Content-Type, Content-Length, Host and the
	// connection's own headers).
	Headers map[string]string `yaml:"headers"`
	// Auth is how calls authenticate; zero means none.
	Auth Auth `yaml:"auth"`
	// Timeout bounds one call (default DefaultTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries (default DefaultMaxRetries; at least 1, since zero is
	// the default) and RetryInterval (fixed, default DefaultRetryInterval)
	// are the system's retry policy.
	MaxRetries    int           `yaml:"max_retries"`
	RetryInterval time.Duration `yaml:"retry_interval"`
}

// Method is one method of an external system.
type Method struct {
	// Name is what scripts call it.
	Name string `yaml:"name"`
	// Verb is the HTTP method: GET, POST, PUT, PATCH or DELETE.
	Verb string `yaml:"verb"`
	// Path is the path template appended to the system's BaseURL:
	// "/orders/{id}". A placeholder {name} (letters, digits and _, not
	// starting with a digit; each name once) is filled with the call's
	// parameter of that name, path-escaped. The call's other parameters
	// go to the query for GET and DELETE and to a JSON object body for
	// POST, PUT and PATCH.
	Path string `yaml:"path"`
}

// Auth kinds.
const (
	AuthNone   = ""
	AuthBearer = "bearer"
	AuthBasic  = "basic"
	AuthHeader = "header"
)

// Auth is how a system's calls authenticate. Secrets are references
// (env:NAME or file:/path), never values, resolved at each call under the
// gateway's secretref.Policy, so that a rotated secret is used at once.
type Auth struct {
	// Kind is "" (none), bearer, basic or header.
	Kind string `yaml:"kind"`
	// Token is bearer's reference: sent as "Authorization: Bearer <token>".
	Token string `yaml:"token"`
	// User (in clear) and Password (a reference) are basic's.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Header names the header of kind header, Value is its reference.
	Header string `yaml:"header"`
	Value  string `yaml:"value"`
}

// Drivers of a database connection.
const (
	DriverPostgres = "postgres"
	DriverMSSQL    = "mssql"
	DriverSQLite   = "sqlite"
)

// Connection is a database connection that cached writes go to.
type Connection struct {
	// Name is what scripts call it.
	Name string `yaml:"name"`
	// Driver is postgres (through pgx), mssql (go-mssqldb) or sqlite
	// (modernc.org/sqlite). A write's SQL uses the driver's placeholders:
	// $1 for postgres, @p1 for mssql, ? or $1 for sqlite.
	Driver string `yaml:"driver"`
	// DSN is a reference (env:NAME or file:/path) to the driver's
	// connection string, resolved when the pool opens; never the string
	// itself.
	DSN string `yaml:"dsn"`
	// Timeout bounds one write, from taking a connection to the commit
	// (default DefaultTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries and RetryInterval are as System's.
	MaxRetries    int           `yaml:"max_retries"`
	RetryInterval time.Duration `yaml:"retry_interval"`
	// MaxConns bounds the pool's open connections (default
	// DefaultMaxConns; SQLite always uses one).
	MaxConns int `yaml:"max_conns"`
	// ExactlyOnce records each write's operation id in the table
	// MarkerTable, in the write's own transaction, so that a repeated
	// attempt finds it and writes nothing.
	ExactlyOnce bool `yaml:"exactly_once"`
}

// WithDefaults returns c with every zero field of its systems and
// connections set to its default.
func (c Config) WithDefaults() Config {
	c.Systems = slices.Clone(c.Systems)
	for i := range c.Systems {
		c.Systems[i] = c.Systems[i].WithDefaults()
	}
	c.Connections = slices.Clone(c.Connections)
	for i := range c.Connections {
		c.Connections[i] = c.Connections[i].WithDefaults()
	}
	return c
}

// Validate returns one *ports.FieldError per broken rule, joined, each on
// the Go path of its field ("Systems[0].Methods[1].Path"): those of every
// system and connection, and a name given twice (to two systems, two
// connections, or a system and a connection). A zero is no default but a
// value: call it on c.WithDefaults().
func (c Config) Validate() error {
	var fe ports.FieldErrors
	seen := map[string]string{}
	unique := func(at, name string) {
		if other, ok := seen[name]; ok && name != "" {
			fe.Add(at+".Name", "%q is also the name of %s", name, other)
		} else {
			seen[name] = at
		}
	}
	for i, s := range c.Systems {
		at := fmt.Sprintf("Systems[%d]", i)
		fe.Nest(at, s.Validate())
		unique(at, s.Name)
	}
	for i, cn := range c.Connections {
		at := fmt.Sprintf("Connections[%d]", i)
		fe.Nest(at, cn.Validate())
		unique(at, cn.Name)
	}
	return fe.Err()
}

// CheckRefs returns one *ports.FieldError per secret reference of c that
// policy refuses (secretref.Policy.Check: it reads no secret), or nil.
func (c Config) CheckRefs(policy secretref.Policy) error {
	return c.eachRef(policy.Check)
}

// ResolveRefs resolves every secret reference of c with policy and returns
// one *ports.FieldError per reference that does not resolve (a missing
// file, an unset variable), each naming the reference, never a value; the
// values read are dropped. A start-up check, so that a broken reference is
// found with the other broken rules rather than at the first call.
func (c Config) ResolveRefs(policy secretref.Policy) error {
	return c.eachRef(policy.Unresolved)
}

// eachRef calls check with each secret reference of c and returns one
// *ports.FieldError per error it returns.
func (c Config) eachRef(check func(ref string) error) error {
	var fe ports.FieldErrors
	at := func(field, ref string) {
		if ref == "" {
			return
		}
		if err := check(ref); err != nil {
			fe.Add(field, "%v", err)
		}
	}
	for i, s := range c.Systems {
		auth := fmt.Sprintf("Systems[%d].Auth.", i)
		at(auth+"Token", s.Auth.Token)
		at(auth+"Password", s.Auth.Password)
		at(auth+"Value", s.Auth.Value)
	}
	for i, cn := range c.Connections {
		at(fmt.Sprintf("Connections[%d].DSN", i), cn.DSN)
	}
	return fe.Err()
}

// WithDefaults returns s with every zero field set to its default.
func (s System) WithDefaults() System {
	s.Timeout = cmpOr(s.Timeout, DefaultTimeout)
	s.MaxRetries = cmpOr(s.MaxRetries, DefaultMaxRetries)
	s.RetryInterval = cmpOr(s.RetryInterval, DefaultRetryInterval)
	return s
}

// WithDefaults returns c with every zero field set to its default.
func (c Connection) WithDefaults() Connection {
	c.Timeout = cmpOr(c.Timeout, DefaultTimeout)
	c.MaxRetries = cmpOr(c.MaxRetries, DefaultMaxRetries)
	c.RetryInterval = cmpOr(c.RetryInterval, DefaultRetryInterval)
	c.MaxConns = cmpOr(c.MaxConns, DefaultMaxConns)
	return c
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// reservedHeaders are set by the gateway itself (or by net/http) and
// cannot be configured in System.Headers.
var reservedHeaders = []string{
	"Authorization", "Idempotency-Key", "Content-Type", "Content-Length", "Host",
	"Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Authorization",
}

// Validate returns one *ports.FieldError per rule s breaks, joined, on Go
// field paths: the name; the base URL (absolute http or https with a host,
// no user information, query or fragment; https off loopback unless
// AllowInsecure); the methods (at least one, names unique, a verb of
// GET, POST, PUT, PATCH or DELETE, a well-formed path template); the
// headers (valid names and values, no reference, none the gateway sets);
// the auth (a known kind whose secrets are references); positive
// durations within their bounds and positive retries.
func (s System) Validate() error {
	var fe ports.FieldErrors
	checkName(&fe, "Name", s.Name)
	checkBaseURL(&fe, s.BaseURL, s.AllowInsecure)
	if s.CAFile != "" && !strings.HasPrefix(s.BaseURL, "https://") {
		fe.Add("CAFile", "set for a system that is not reached over https")
	}
	if len(s.Methods) == 0 {
		fe.Add("Methods", "no method: a system needs at least one")
	}
	seen := map[string]int{}
	for i, m := range s.Methods {
		at := fmt.Sprintf("Methods[%d]", i)
		fe.Nest(at, m.Validate())
		if j, ok := seen[m.Name]; ok && m.Name != "" {
			fe.Add(at+".Name", "%q is also the name of Methods[%d]", m.Name, j)
		} else {
			seen[m.Name] = i
		}
	}
	for _, k := range sortedKeys(s.Headers) {
		v := s.Headers[k]
		at := "Headers[" + k + "]"
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			fe.Add("Headers", "%q is not a valid header name", k)
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, k) }):
			fe.Add(at, "the gateway sets %s itself (authentication goes in Auth)", http.CanonicalHeaderKey(k))
		case !httpguts.ValidHeaderFieldValue(v):
			fe.Add(at, "not a valid header value (control characters)")
		case strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "file:"):
			fe.Add(at, "a header's value is sent as written: a secret belongs in Auth (kind header)")
		}
	}
	fe.Nest("Auth", s.Auth.Validate())
	checkPolicy(&fe, s.Timeout, s.MaxRetries, s.RetryInterval)
	return fe.Err()
}

// Validate returns one *ports.FieldError per rule m breaks.
func (m Method) Validate() error {
	var fe ports.FieldErrors
	checkName(&fe, "Name", m.Name)
	switch m.Verb {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		fe.Add("Verb", "%q is not one of GET, POST, PUT, PATCH, DELETE", m.Verb)
	}
	if _, err := parseTemplate(m.Path); err != nil {
		fe.Add("Path", "%v", err)
	}
	return fe.Err()
}

// Validate returns one *ports.FieldError per rule a breaks: an unknown
// kind, a secret that is not a reference, a field the kind does not use.
func (a Auth) Validate() error {
	var fe ports.FieldErrors
	ref := func(field, v string) {
		switch {
		case v == "":
			fe.Add(field, "empty: kind %s needs a secret reference (env:NAME or file:/path)", a.Kind)
		case !ports.IsSecretRef(v):
			fe.Add(field, "not a secret reference: write env:NAME or file:/path, never the secret itself")
		}
	}
	unused := func(field, v string) {
		switch {
		case v == "":
		case a.Kind == AuthNone:
			fe.Add(field, "set, but Kind is empty (no auth)")
		default:
			fe.Add(field, "not used by kind %s", a.Kind)
		}
	}
	switch a.Kind {
	case AuthNone:
		unused("Token", a.Token)
		unused("User", a.User)
		unused("Password", a.Password)
		unused("Header", a.Header)
		unused("Value", a.Value)
	case AuthBearer:
		ref("Token", a.Token)
		unused("User", a.User)
		unused("Password", a.Password)
		unused("Header", a.Header)
		unused("Value", a.Value)
	case AuthBasic:
		switch {
		case a.User == "":
			fe.Add("User", "empty: kind basic needs a user")
		case strings.Contains(a.User, ":") || !httpguts.ValidHeaderFieldValue(a.User) || !utf8.ValidString(a.User):
			fe.Add("User", "holds a colon or a control character")
		}
		ref("Password", a.Password)
		unused("Token", a.Token)
		unused("Header", a.Header)
		unused("Value", a.Value)
	case AuthHeader:
		switch {
		case !httpguts.ValidHeaderFieldName(a.Header):
			fe.Add("Header", "%q is not a valid header name", a.Header)
		case slices.ContainsFunc(reservedHeaders[1:], func(r string) bool { return strings.EqualFold(r, a.Header) }):
			fe.Add("Header", "the gateway sets %s itself", http.CanonicalHeaderKey(a.Header))
		}
		ref("Value", a.Value)
		unused("Token", a.Token)
		unused("User", a.User)
		unused("Password", a.Password)
	default:
		fe.Add("Kind", "%q is not one of bearer, basic, header (or empty for none)", a.Kind)
	}
	return fe.Err()
}

// Validate returns one *ports.FieldError per rule c breaks: the name; the
// driver (postgres, mssql or sqlite); the DSN, a secret reference;
// positive durations within their bounds, positive retries and
// connections.
func (c Connection) Validate() error {
	var fe ports.FieldErrors
	checkName(&fe, "Name", c.Name)
	switch c.Driver {
	case DriverPostgres, DriverMSSQL, DriverSQLite:
	default:
		fe.Add("Driver", "%q is not one of postgres, mssql, sqlite", c.Driver)
	}
	switch {
	case c.DSN == "":
		fe.Add("DSN", "empty: a secret reference (env:NAME or file:/path) to the connection string")
	case !ports.IsSecretRef(c.DSN):
		fe.Add("DSN", "not a secret reference: write env:NAME or file:/path, never the connection string itself")
	}
	checkPolicy(&fe, c.Timeout, c.MaxRetries, c.RetryInterval)
	if c.MaxConns <= 0 || c.MaxConns > 1000 {
		fe.Add("MaxConns", "must be from 1 to 1000, got %d (leave it out for the default)", c.MaxConns)
	}
	return fe.Err()
}

func checkName(fe *ports.FieldErrors, field, v string) {
	switch {
	case strings.TrimSpace(v) == "":
		fe.Add(field, "empty")
	case !utf8.ValidString(v):
		fe.Add(field, "%q is not valid UTF-8", v)
	case strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		fe.Add(field, "%q holds a control character", v)
	case strings.TrimSpace(v) != v:
		fe.Add(field, "%q has leading or trailing spaces", v)
	case len(v) > MaxNameBytes:
		fe.Add(field, "is %d bytes, over the limit of %d", len(v), MaxNameBytes)
	}
}

func checkPolicy(fe *ports.FieldErrors, timeout time.Duration, retries int, interval time.Duration) {
	if timeout <= 0 || timeout > MaxTimeout {
		fe.Add("Timeout", "must be positive and at most %s, got %s (leave it out for the default)", MaxTimeout, timeout)
	}
	if retries <= 0 || retries > MaxMaxRetries {
		fe.Add("MaxRetries", "must be from 1 to %d, got %d (leave it out for the default)", MaxMaxRetries, retries)
	}
	if interval <= 0 || interval > MaxRetryInterval {
		fe.Add("RetryInterval", "must be positive and at most %s, got %s (leave it out for the default)", MaxRetryInterval, interval)
	}
}

func checkBaseURL(fe *ports.FieldErrors, raw string, allowInsecure bool) {
	if raw == "" {
		fe.Add("BaseURL", "empty: the system's http or https URL")
		return
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		// url.Parse's error quotes the URL whole: leave it out.
		fe.Add("BaseURL", "not an absolute http or https URL with a host")
		return
	}
	switch {
	case u.User != nil:
		fe.Add("BaseURL", "holds user information: credentials belong in Auth, as secret references")
	case u.RawQuery != "" || u.ForceQuery:
		fe.Add("BaseURL", "holds a query: a method's parameters make the query")
	case u.Fragment != "":
		fe.Add("BaseURL", "holds a fragment")
	case u.Scheme == "http" && !allowInsecure && !loopbackHost(u.Hostname()):
		fe.Add("BaseURL", "http to %s, off loopback, sends credentials and data in clear: use https, or set AllowInsecure", u.Hostname())
	}
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
