package api

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/siteline/outbox/ports"
)

// NewOwnToken is the body of POST /me/tokens: a logged-in account (a session,
// never a token) makes a token of its own, as outbox login does. The token's
// role is the account's, read at each request; it dies with the account.
type NewOwnToken struct {
	// Label names the token among the account's (letters, digits and
	// . _ - @, at most 32); absent means "cli".
	Label string `json:"label,omitempty"`
	// ExpiresAt is required: in the future and within the longest lifetime
	// the server allows (30 days by default).
	ExpiresAt *time.Time `json:"expires_at"`
}

// AdminRecord is one entry of the admin audit log (GET /audit).
type AdminRecord struct {
	ID      int64             `json:"id"`
	At      time.Time         `json:"at"`
	Actor   string            `json:"actor"`
	Kind    ports.AdminKind   `json:"kind"`
	Name    string            `json:"name"`
	Action  ports.AdminAction `json:"action"`
	Summary string            `json:"summary,omitempty"`
}

// AdminPage is one page of GET /audit, newest first.
type AdminPage struct {
	Items []AdminRecord `json:"items"`
	// Next is the cursor of the following page (the after parameter), ""
	// on the last page.
	Next string `json:"next,omitempty"`
}

// The query parameters of GET /audit besides limit and after.
const (
	ParamKind = "kind"
	ParamName = "name"
)

// Paging of GET /audit.
const (
	// DefaultAuditLimit is the page size when limit is absent.
	DefaultAuditLimit = 50
	// MaxAuditLimit is the largest page.
	MaxAuditLimit = 200
)

// AuditQuery is a parsed GET /audit request.
type AuditQuery struct {
	Kind  ports.AdminKind
	Name  string
	Limit int
	// After is the decoded cursor: the id of the last record of the
	// previous page; 0 for the first page.
	After int64
}

// Values encodes q as query parameters.
func (q AuditQuery) Values() url.Values {
	v := url.Values{}
	if q.Kind != "" {
		v.Set(ParamKind, string(q.Kind))
	}
	if q.Name != "" {
		v.Set(ParamName, q.Name)
	}
	if q.Limit > 0 {
		v.Set(ParamLimit, strconv.Itoa(q.Limit))
	}
	if q.After > 0 {
		v.Set(ParamAfter, AuditCursor(q.After))
	}
	return v
}

// PortsQuery is q as the port's query.
func (q AuditQuery) PortsQuery() ports.AdminQuery {
	return ports.AdminQuery{Kind: q.Kind, Name: q.Name, Before: q.After, Limit: q.Limit}
}

// AuditCursor is the after parameter that pages past the record id.
func AuditCursor(id int64) string {
	if id <= 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// ParseAuditQuery reads the parameters of GET /audit: kind (list, channel,
// user or token), name (at most ports.MaxAdminName bytes), limit (1 to
// MaxAuditLimit, default DefaultAuditLimit) and after (a cursor a previous
// page gave). Errors name the parameter.
func ParseAuditQuery(v url.Values) (AuditQuery, error) {
	q := AuditQuery{Limit: DefaultAuditLimit, Name: strings.TrimSpace(v.Get(ParamName))}
	if k := strings.TrimSpace(v.Get(ParamKind)); k != "" {
		q.Kind = ports.AdminKind(strings.ToLower(k))
		if !q.Kind.Valid() {
			return AuditQuery{}, fmt.Errorf("kind: %q is not one of %v", clip(k), ports.AdminKinds)
		}
	}
	if len(q.Name) > ports.MaxAdminName {
		return AuditQuery{}, fmt.Errorf("name: over %d bytes", ports.MaxAdminName)
	}
	if s := strings.TrimSpace(v.Get(ParamLimit)); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxAuditLimit {
			return AuditQuery{}, fmt.Errorf("limit: %q is not a whole number from 1 to %d", clip(s), MaxAuditLimit)
		}
		q.Limit = n
	}
	if s := strings.TrimSpace(v.Get(ParamAfter)); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || strconv.FormatInt(n, 10) != s {
			return AuditQuery{}, fmt.Errorf("after: %q is not a cursor this API gave", clip(s))
		}
		q.After = n
	}
	return q, nil
}

// FromAdminPage is a page of the admin audit log in wire form.
func FromAdminPage(p ports.AdminPage) AdminPage {
	out := AdminPage{Items: make([]AdminRecord, len(p.Records)), Next: AuditCursor(p.Next)}
	for i, r := range p.Records {
		out.Items[i] = AdminRecord{ID: r.ID, At: r.At.UTC(), Actor: r.Actor, Kind: r.Kind, Name: r.Name,
			Action: r.Action, Summary: r.Summary}
	}
	return out
}
