// Package memstore is an in-memory [ports.Store], [ports.AuditLog],
// [ports.AccountStore], [ports.AdminAudit] and [ports.SiteCallStore]: the
// reference adapter of the store, account, admin audit and site-call
// contracts (ports/storetest, ports/accountstest, ports/adminaudittest,
// ports/sitecallstest) and the store of the core's
// unit tests. It keeps everything in maps guarded by one mutex and is safe
// for concurrent use; nothing survives the process.
//
// Values are copied in and out: a caller that mutates a slice it passed in or
// got back never changes the stored state. Times are kept in UTC at full
// precision. A zero time means unset, as NULL does in the SQL adapters, and
// compares like NULL: a bound or a condition on an unset time never holds (a
// Retrying row without NextAttemptAt is not due; a terminal row without
// UpdatedAt is not purged).
package memstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

var (
	_ ports.Store    = (*Store)(nil)
	_ ports.AuditLog = (*Store)(nil)
)

// Store is the in-memory Notifications table and audit log. The zero value is
// not usable; call New.
type Store struct {
	mu sync.Mutex

	rows map[string]*row
	// order holds every row, ordered by (CreatedAt, ID) ascending when
	// sorted is set; Query and the bulk operations walk it.
	order  []*row
	sorted bool

	// gen stamps every placement of a row in the claim index (heap.go).
	gen     uint64
	ready   queue[readyEntry]
	leased  queue[timedEntry]
	waiting queue[timedEntry]

	audit map[string][]ports.AuditRecord

	// acct holds the operator accounts, tokens and sessions (accounts.go).
	acct accountTables

	// admin is the admin audit log in append order; a record's ID is its
	// index plus one (adminaudit.go).
	admin []ports.AdminRecord

	// sc is the mirror of the sites' cached operations (sitecalls.go).
	sc siteCallTables
}

// row is one stored notification and the generation of its claim-index entry.
type row struct {
	n   ports.Notification
	gen uint64
}

// New returns an empty store.
func New() *Store {
	return &Store{
		rows:    map[string]*row{},
		sorted:  true,
		ready:   queue[readyEntry]{less: readyLess},
		leased:  queue[timedEntry]{less: timedLess},
		waiting: queue[timedEntry]{less: timedLess},
		audit:   map[string][]ports.AuditRecord{},
		acct:    newAccountTables(),
	}
}

// Insert implements ports.Store.
func (s *Store) Insert(ctx context.Context, ns []ports.Notification) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: insert: %w", err)
	}
	for i, n := range ns {
		if n.ID == "" {
			return nil, fmt.Errorf("memstore: insert: notification %d: empty id: %w", i, ports.ErrInvalid)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var inserted []string
	for _, n := range ns {
		if _, ok := s.rows[n.ID]; ok {
			continue
		}
		r := &row{n: clone(n)}
		s.rows[n.ID] = r
		if last := len(s.order) - 1; last >= 0 && compareKey(r.n.CreatedAt, r.n.ID, s.order[last]) < 0 {
			s.sorted = false
		}
		s.order = append(s.order, r)
		s.place(r, time.Time{})
		inserted = append(inserted, n.ID)
	}
	return inserted, nil
}

// Claim implements ports.Store.
func (s *Store) Claim(ctx context.Context, req ports.ClaimRequest) ([]ports.Notification, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: claim: %w", err)
	}
	switch {
	case req.Owner == "":
		return nil, fmt.Errorf("memstore: claim: empty owner: %w", ports.ErrInvalid)
	case req.Limit <= 0:
		return nil, fmt.Errorf("memstore: claim: limit %d is not positive: %w", req.Limit, ports.ErrInvalid)
	case req.Lease <= 0:
		return nil, fmt.Errorf("memstore: claim: lease %s is not positive: %w", req.Lease, ports.ErrInvalid)
	case req.Now.IsZero():
		return nil, fmt.Errorf("memstore: claim: zero claim instant: %w", ports.ErrInvalid)
	}
	now := req.Now.UTC()
	until := now.Add(req.Lease)

	s.mu.Lock()
	defer s.mu.Unlock()
	// Leases that ended and retries that came due by now go back to ready.
	for _, q := range []*queue[timedEntry]{&s.leased, &s.waiting} {
		for q.Len() > 0 && !q.peek().at.After(now) {
			e := q.pop()
			if r := s.current(e.id, e.gen); r != nil {
				s.place(r, now)
			}
		}
	}
	var out []ports.Notification
	for len(out) < req.Limit && s.ready.Len() > 0 {
		e := s.ready.pop()
		r := s.current(e.id, e.gen)
		if r == nil {
			continue
		}
		if due(r.n, now) && !leased(r.n, now) {
			r.n.ClaimedBy = req.Owner
			r.n.ClaimedUntil = until
			out = append(out, clone(r.n))
		}
		// A claimed row moves to leased; a row ready at an earlier claim
		// instant but not at this one moves to leased or waiting.
		s.place(r, now)
	}
	return out, nil
}

// Record implements ports.Store. An update applies when its row is marked as
// claimed by owner, whether or not the lease has run out: Record has no clock,
// and a lease that ran out is only lost once another owner claims the row.
func (s *Store) Record(ctx context.Context, owner string, updates []ports.Update) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: record: %w", err)
	}
	if owner == "" {
		return nil, fmt.Errorf("memstore: record: empty owner: %w", ports.ErrInvalid)
	}
	for _, u := range updates {
		if !u.Status.Valid() {
			return nil, fmt.Errorf("memstore: record %s: status %q: %w", u.ID, u.Status, ports.ErrInvalid)
		}
		for _, rec := range u.Records {
			if rec.NotificationID != u.ID {
				return nil, fmt.Errorf("memstore: record %s: an audit record of %q: %w", u.ID, rec.NotificationID, ports.ErrInvalid)
			}
		}
	}
	last := make(map[string]int, len(updates))
	for i, u := range updates {
		last[u.ID] = i
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost []string
	for i, u := range updates {
		if last[u.ID] != i {
			continue // the last update of an id wins
		}
		r := s.rows[u.ID]
		if r == nil || r.n.ClaimedBy != owner {
			lost = append(lost, u.ID)
			continue
		}
		s.appendLocked(u.Records)
		n := &r.n
		n.Status = u.Status
		n.RetryCount = u.RetryCount
		n.LastError = u.LastError
		n.ResolvedTargets = slices.Clone(u.ResolvedTargets)
		n.Targets = cloneTargets(u.Targets)
		n.LastAttemptAt = utc(u.LastAttemptAt)
		n.NextAttemptAt = utc(u.NextAttemptAt)
		n.DeliveredAt = utc(u.DeliveredAt)
		n.UpdatedAt = utc(u.UpdatedAt)
		n.ClaimedBy = ""
		n.ClaimedUntil = time.Time{}
		s.place(r, time.Time{})
	}
	return lost, nil
}

// Release implements ports.Store. Ids that owner does not hold are ignored.
func (s *Store) Release(ctx context.Context, owner string, ids []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: release: %w", err)
	}
	if owner == "" {
		return fmt.Errorf("memstore: release: empty owner: %w", ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		r := s.rows[id]
		if r == nil || r.n.ClaimedBy != owner {
			continue
		}
		r.n.ClaimedBy = ""
		r.n.ClaimedUntil = time.Time{}
		s.place(r, time.Time{})
	}
	return nil
}

// ReleaseNode implements ports.Store.
func (s *Store) ReleaseNode(ctx context.Context, node, keep string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: release the leases of node %q: %w", node, err)
	}
	if node == "" || strings.Contains(node, "/") {
		return 0, fmt.Errorf("memstore: release the leases of node %q: a node id is not empty and holds no '/': %w", node, ports.ErrInvalid)
	}
	prefix := ports.LeaseOwnerPrefix(node)
	s.mu.Lock()
	defer s.mu.Unlock()
	released := 0
	for _, r := range s.rows {
		if !r.n.Status.Due() || r.n.ClaimedBy == keep || !strings.HasPrefix(r.n.ClaimedBy, prefix) {
			continue
		}
		r.n.ClaimedBy = ""
		r.n.ClaimedUntil = time.Time{}
		s.place(r, time.Time{})
		released++
	}
	return released, nil
}

// Get implements ports.Store.
func (s *Store) Get(ctx context.Context, id string) (ports.Notification, error) {
	if err := ctx.Err(); err != nil {
		return ports.Notification{}, fmt.Errorf("memstore: get %s: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	if r == nil {
		return ports.Notification{}, fmt.Errorf("memstore: get %s: %w", id, ports.ErrNotFound)
	}
	return clone(r.n), nil
}

// Statuses implements ports.Store.
func (s *Store) Statuses(ctx context.Context, site string, ids []string) (map[string]ports.Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: statuses: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]ports.Status, len(ids))
	for _, id := range ids {
		if r := s.rows[id]; r != nil && (site == "" || r.n.SourceSite == site) {
			out[id] = r.n.Status
		}
	}
	return out, nil
}

// Query implements ports.Store. The cursor is opaque: the CreatedAt and ID of
// the last row of the page, base64-encoded behind a version prefix.
func (s *Store) Query(ctx context.Context, f ports.Filter, page ports.PageRequest) (ports.Page, error) {
	if err := ctx.Err(); err != nil {
		return ports.Page{}, fmt.Errorf("memstore: query: %w", err)
	}
	if page.Limit <= 0 {
		return ports.Page{}, fmt.Errorf("memstore: query: limit %d is not positive: %w", page.Limit, ports.ErrInvalid)
	}
	m, err := newMatcher(f)
	if err != nil {
		return ports.Page{}, fmt.Errorf("memstore: query: %w", err)
	}
	var after *cursor
	if page.After != "" {
		c, err := decodeCursor(page.After)
		if err != nil {
			return ports.Page{}, fmt.Errorf("memstore: query: %w", err)
		}
		after = &c
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.sortOrder()
	// Newest first walks order down from before the cursor's row, oldest
	// first up from after it.
	start, end, step := len(s.order)-1, -1, -1
	if page.Oldest {
		start, end, step = 0, len(s.order), 1
	}
	if after != nil {
		i, found := slices.BinarySearchFunc(s.order, *after, func(r *row, c cursor) int {
			return -compareKey(c.created, c.id, r)
		})
		start = i - 1
		if page.Oldest {
			start = i
			if found {
				start = i + 1
			}
		}
	}
	var p ports.Page
	for i := start; i != end; i += step {
		r := s.order[i]
		if !m.match(r.n) {
			continue
		}
		if len(p.Items) == page.Limit {
			last := p.Items[len(p.Items)-1]
			p.Next = encodeCursor(cursor{created: last.CreatedAt, id: last.ID})
			break
		}
		p.Items = append(p.Items, clone(r.n))
	}
	return p, nil
}

// Count implements ports.Store.
func (s *Store) Count(ctx context.Context, f ports.Filter) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: count: %w", err)
	}
	m, err := newMatcher(f)
	if err != nil {
		return 0, fmt.Errorf("memstore: count: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var c int64
	for _, r := range s.rows {
		if m.match(r.n) {
			c++
		}
	}
	return c, nil
}

// CountByStatus implements ports.Store.
func (s *Store) CountByStatus(ctx context.Context, f ports.Filter, limit int64) (map[ports.Status]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: count by status: %w", err)
	}
	m, err := newMatcher(f)
	if err != nil {
		return nil, fmt.Errorf("memstore: count by status: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[ports.Status]int64{}
	for _, r := range s.rows {
		if m.match(r.n) && (limit <= 0 || out[r.n.Status] <= limit) {
			out[r.n.Status]++ // up to limit+1: more than limit
		}
	}
	return out, nil
}

// KPIs implements ports.Store.
func (s *Store) KPIs(ctx context.Context, req ports.KPIRequest) (ports.KPIs, error) {
	if err := ctx.Err(); err != nil {
		return ports.KPIs{}, fmt.Errorf("memstore: kpis: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out ports.KPIs
	sites := map[string]*ports.SiteKPICounts{}
	for _, r := range s.rows {
		n := &r.n
		var k ports.KPICounts
		if n.Status.Due() {
			k.QueueDepth = 1
			if before(n.CreatedAt, req.StuckBefore) {
				k.Stuck = 1
			}
			k.OldestPendingAt = n.CreatedAt
		}
		if n.Status == ports.StatusParked {
			k.Parked = 1
		}
		if !n.DeliveredAt.IsZero() && !n.DeliveredAt.Before(req.DeliveredSince) {
			k.Delivered = 1
		}
		if k == (ports.KPICounts{}) {
			continue
		}
		add(&out.Global, k)
		sk := sites[n.SourceSite]
		if sk == nil {
			sk = &ports.SiteKPICounts{Site: n.SourceSite}
			sites[n.SourceSite] = sk
		}
		add(&sk.KPICounts, k)
	}
	for _, sk := range sites {
		out.Sites = append(out.Sites, *sk)
	}
	slices.SortFunc(out.Sites, func(a, b ports.SiteKPICounts) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// add adds the figures of one row to a total.
func add(total *ports.KPICounts, k ports.KPICounts) {
	total.QueueDepth += k.QueueDepth
	total.Stuck += k.Stuck
	total.Parked += k.Parked
	total.Delivered += k.Delivered
	if !k.OldestPendingAt.IsZero() && (total.OldestPendingAt.IsZero() || k.OldestPendingAt.Before(total.OldestPendingAt)) {
		total.OldestPendingAt = k.OldestPendingAt
	}
}

// Transition implements ports.Store.
func (s *Store) Transition(ctx context.Context, req ports.TransitionRequest) ([]ports.Moved, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: transition: %w", err)
	}
	if !req.From.Valid() || !req.To.Valid() {
		return nil, fmt.Errorf("memstore: transition %q->%q: unknown status: %w", req.From, req.To, ports.ErrInvalid)
	}
	m, err := newMatcher(req.Selection.Filter)
	if err != nil {
		return nil, fmt.Errorf("memstore: transition: %w", err)
	}
	now := utc(req.Now)

	s.mu.Lock()
	defer s.mu.Unlock()
	var selected []*row
	if len(req.Selection.IDs) > 0 {
		seen := make(map[string]bool, len(req.Selection.IDs))
		for _, id := range req.Selection.IDs {
			if r := s.rows[id]; r != nil && !seen[id] {
				seen[id] = true
				selected = append(selected, r)
			}
		}
	} else {
		s.sortOrder()
		for _, r := range s.order {
			if m.match(r.n) {
				selected = append(selected, r)
			}
		}
	}
	var moved []ports.Moved
	for _, r := range selected {
		n := &r.n
		if n.Status != req.From || !req.LeaseEndedBy.IsZero() && n.ClaimedBy != "" &&
			(n.ClaimedUntil.IsZero() || n.ClaimedUntil.After(req.LeaseEndedBy)) {
			continue
		}
		n.Status = req.To
		n.UpdatedAt = now
		n.ClaimedBy = ""
		n.ClaimedUntil = time.Time{}
		if req.Reset {
			n.RetryCount = 0
			n.NextAttemptAt = time.Time{}
			n.LastError = ""
		}
		if req.DueNow {
			n.NextAttemptAt = time.Time{}
		}
		s.place(r, time.Time{})
		moved = append(moved, ports.Moved{ID: n.ID, SourceSite: n.SourceSite, Type: n.Type})
	}
	return moved, nil
}

// Purge implements ports.Store. It deletes the oldest rows (by CreatedAt)
// first.
func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: purge: %w", err)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("memstore: purge: limit %d is not positive: %w", limit, ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sortOrder()
	var deleted []string
	for _, r := range s.order {
		if len(deleted) == limit {
			break
		}
		if r.n.Status.Terminal() && (r.n.UpdatedAt.IsZero() || r.n.UpdatedAt.Before(cutoff)) {
			delete(s.rows, r.n.ID)
			deleted = append(deleted, r.n.ID)
		}
	}
	if len(deleted) > 0 {
		// Drop the deleted rows from order. Their claim-index entries, if
		// any, are stale already (terminal rows have none) and are dropped
		// when they surface.
		s.order = slices.DeleteFunc(s.order, func(r *row) bool { return s.rows[r.n.ID] != r })
	}
	return deleted, nil
}

// Append implements ports.AuditLog.
func (s *Store) Append(ctx context.Context, records []ports.AuditRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: append: %w", err)
	}
	for i, rec := range records {
		if rec.NotificationID == "" {
			return fmt.Errorf("memstore: append: record %d: empty notification id: %w", i, ports.ErrInvalid)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendLocked(records)
	return nil
}

// appendLocked appends records to the audit log; s.mu is held.
func (s *Store) appendLocked(records []ports.AuditRecord) {
	for _, rec := range records {
		rec.At = utc(rec.At)
		rec.Targets = slices.Clone(rec.Targets)
		s.audit[rec.NotificationID] = append(s.audit[rec.NotificationID], rec)
	}
}

// History implements ports.AuditLog.
func (s *Store) History(ctx context.Context, notificationID string) ([]ports.AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: history %s: %w", notificationID, err)
	}
	s.mu.Lock()
	h := slices.Clone(s.audit[notificationID])
	for i := range h {
		h[i].Targets = slices.Clone(h[i].Targets)
	}
	s.mu.Unlock()
	// Records are kept in append order; a stable sort by At gives "At
	// ascending, then append order".
	slices.SortStableFunc(h, func(a, b ports.AuditRecord) int { return a.At.Compare(b.At) })
	if h == nil {
		h = []ports.AuditRecord{}
	}
	return h, nil
}

// Forget implements ports.AuditLog.
func (s *Store) Forget(ctx context.Context, notificationIDs []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: forget: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range notificationIDs {
		delete(s.audit, id)
	}
	return nil
}

// --- claim index ------------------------------------------------------------

// place gives r a new generation and files it in the claim index as it stands
// at instant now (the zero time files it by its own instants alone). Rows
// that are not Pending or Retrying are never due and are not filed; a
// Retrying row with no NextAttemptAt is due at once.
func (s *Store) place(r *row, now time.Time) {
	s.gen++
	r.gen = s.gen
	n := &r.n
	switch {
	case !n.Status.Due():
	case leased(*n, now):
		s.leased.push(timedEntry{at: n.ClaimedUntil, id: n.ID, gen: r.gen})
	case n.Status == ports.StatusRetrying && n.NextAttemptAt.After(now):
		s.waiting.push(timedEntry{at: n.NextAttemptAt, id: n.ID, gen: r.gen})
	default:
		s.ready.push(readyEntry{priority: n.Priority, created: n.CreatedAt, id: n.ID, gen: r.gen})
	}
}

// current returns the row of an index entry, or nil when the entry is stale.
func (s *Store) current(id string, gen uint64) *row {
	r := s.rows[id]
	if r == nil || r.gen != gen {
		return nil
	}
	return r
}

// due reports whether n may be dispatched at now: Pending, or Retrying with
// NextAttemptAt unset or not after now.
func due(n ports.Notification, now time.Time) bool {
	switch n.Status {
	case ports.StatusPending:
		return true
	case ports.StatusRetrying:
		return !n.NextAttemptAt.After(now)
	}
	return false
}

// leased reports whether n's lease lasts beyond now.
func leased(n ports.Notification, now time.Time) bool {
	return !n.ClaimedUntil.IsZero() && n.ClaimedUntil.After(now)
}

// --- order and cursors --------------------------------------------------------

// compareKey compares the query key (CreatedAt, ID) of a row with a key.
func compareKey(created time.Time, id string, r *row) int {
	if c := created.Compare(r.n.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(id, r.n.ID)
}

// sortOrder sorts order by (CreatedAt, ID) if an insert left it unsorted.
func (s *Store) sortOrder() {
	if s.sorted {
		return
	}
	slices.SortFunc(s.order, func(a, b *row) int {
		return cmp.Or(a.n.CreatedAt.Compare(b.n.CreatedAt), strings.Compare(a.n.ID, b.n.ID))
	})
	s.sorted = true
}

// cursor is the position after which a page starts, in the order of the
// query (newest or oldest first).
type cursor struct {
	created time.Time
	id      string
}

const cursorPrefix = "m1."

func encodeCursor(c cursor) string {
	raw := c.created.UTC().Format(time.RFC3339Nano) + "|" + c.id
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(s string) (cursor, error) {
	bad := func(why string) (cursor, error) {
		return cursor{}, fmt.Errorf("cursor %.40q %s: %w", s, why, ports.ErrInvalid)
	}
	body, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return bad("has an unknown format")
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return bad("is not base64url")
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok || id == "" {
		return bad("has no row id")
	}
	created, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return bad("has no valid instant")
	}
	return cursor{created: created.UTC(), id: id}, nil
}

// --- filters ------------------------------------------------------------------

// matcher is a validated Filter.
type matcher struct {
	f        ports.Filter
	statuses map[ports.Status]bool
	subject  string // lower-cased ASCII
}

func newMatcher(f ports.Filter) (matcher, error) {
	m := matcher{f: f, subject: asciiLower(f.Subject)}
	if len(f.Statuses) > 0 {
		m.statuses = make(map[ports.Status]bool, len(f.Statuses))
		for _, st := range f.Statuses {
			if !st.Valid() {
				return matcher{}, fmt.Errorf("filter status %q: %w", st, ports.ErrInvalid)
			}
			m.statuses[st] = true
		}
	}
	return m, nil
}

func (m matcher) match(n ports.Notification) bool {
	f := &m.f
	switch {
	case m.statuses != nil && !m.statuses[n.Status],
		f.Type != "" && n.Type != f.Type,
		f.SourceSite != "" && n.SourceSite != f.SourceSite,
		f.List != "" && n.List != f.List,
		!f.CreatedFrom.IsZero() && !atOrAfter(n.CreatedAt, f.CreatedFrom),
		!f.CreatedTo.IsZero() && !before(n.CreatedAt, f.CreatedTo),
		!f.UpdatedFrom.IsZero() && !atOrAfter(n.UpdatedAt, f.UpdatedFrom),
		!f.UpdatedTo.IsZero() && !before(n.UpdatedAt, f.UpdatedTo),
		!f.StuckBefore.IsZero() && !(n.Status.Due() && before(n.CreatedAt, f.StuckBefore)),
		m.subject != "" && !strings.Contains(asciiLower(n.Subject), m.subject):
		return false
	}
	return true
}

// asciiLower lower-cases the ASCII letters of s and leaves every other byte
// as it is.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// --- times and copies ---------------------------------------------------------

// before reports a < b, false when either is unset (as NULL compares in SQL).
func before(a, b time.Time) bool { return !a.IsZero() && !b.IsZero() && a.Before(b) }

// atOrAfter reports a >= b, false when either is unset.
func atOrAfter(a, b time.Time) bool { return !a.IsZero() && !b.IsZero() && !a.Before(b) }

// utc returns t in UTC without a monotonic reading, and the canonical zero
// time for any zero time.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// cloneTargets returns a copy of ts with its times in UTC; nil stays nil.
func cloneTargets(ts []ports.TargetState) []ports.TargetState {
	out := slices.Clone(ts)
	for i := range out {
		out[i].LastAttemptAt = utc(out[i].LastAttemptAt)
		out[i].DeliveredAt = utc(out[i].DeliveredAt)
	}
	return out
}

// clone returns a deep copy of n with its times in UTC.
func clone(n ports.Notification) ports.Notification {
	n.TypeData = slices.Clone(n.TypeData)
	n.ResolvedTargets = slices.Clone(n.ResolvedTargets)
	n.Targets = cloneTargets(n.Targets)
	n.SiteEnqueuedAt = utc(n.SiteEnqueuedAt)
	n.CreatedAt = utc(n.CreatedAt)
	n.UpdatedAt = utc(n.UpdatedAt)
	n.LastAttemptAt = utc(n.LastAttemptAt)
	n.NextAttemptAt = utc(n.NextAttemptAt)
	n.DeliveredAt = utc(n.DeliveredAt)
	n.ExpiresAt = utc(n.ExpiresAt)
	n.ClaimedUntil = utc(n.ClaimedUntil)
	return n
}
