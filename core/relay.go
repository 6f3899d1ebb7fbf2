package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// This file is the site link's standing call at central (Sync): the
// sites' health, the operators' commands relayed to a site's leader and
// their answers, and the reconciliation that asks a leader for its change
// feed. The reconciliation's timing is kept in memory, per central node;
// the cursor is in the store, shared by every node.

// Bounds of one Sync.
const (
	// maxSyncCommands is the most commands one Sync answers.
	maxSyncCommands = 100
	// maxSyncAnswers is the most answers one Sync takes.
	maxSyncAnswers = 1000
	// syncPollInterval is how often a waiting Sync looks in the store for
	// commands requested on other central nodes.
	syncPollInterval = time.Second
	// feedAnswerTimeout is how long central waits for the page it asked a
	// leader for before it asks again.
	feedAnswerTimeout = time.Minute
	// commandChunk is how many commands one RequestSiteCommands stores.
	commandChunk = 1000
)

// relayState is what a Service keeps in memory of the sites that call it.
type relayState struct {
	mu    sync.Mutex
	sites map[string]*siteRelay
	// requested is closed, and replaced, when commands are requested on
	// this node or a feed page asks for the next: the waiting Syncs look
	// again.
	requested chan struct{}
}

// siteRelay is one site's reconciliation state on this node.
type siteRelay struct {
	// feedMu orders the feed pages of the site on this node, so that each
	// is checked against the cursor the one before stored.
	feedMu sync.Mutex
	// The fields below are under relayState.mu. leader is the node that
	// last called Sync as the site's leader ("" before any did); due is
	// when to ask it for a feed page next (zero: at once).
	leader string
	led    bool
	due    time.Time
	// seen is when the site's leader last called Sync on this node.
	seen time.Time
}

func (r *relayState) init() {
	r.sites = map[string]*siteRelay{}
	r.requested = make(chan struct{})
}

// site returns the state of site, made on first use; r.mu is held.
func (r *relayState) site(site string) *siteRelay {
	sr, ok := r.sites[site]
	if !ok {
		sr = &siteRelay{}
		r.sites[site] = sr
	}
	return sr
}

// signal returns the channel closed at the next wake-up.
func (r *relayState) signal() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requested
}

// wake wakes every waiting Sync of this node.
func (r *relayState) wake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.requested)
	r.requested = make(chan struct{})
}

// setDue sets when the site's leader is next asked for a feed page.
func (r *relayState) setDue(site string, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.site(site).due = due
}

// takeFeed reports whether node, leading site, is to be asked for a feed
// page now: on its first Sync as leader here, when the leader changed, when
// the site comes back after an outage (its leader's last Sync here is more
// than staleAfter old: telemetry of that time may be lost), and once the
// page's time has come. Asking postpones the next ask by
// feedAnswerTimeout, for the case the page never comes.
func (r *relayState) takeFeed(site, node string, now time.Time, staleAfter time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	sr := r.site(site)
	if !sr.led || sr.leader != node || now.Sub(sr.seen) > staleAfter {
		sr.led, sr.leader, sr.due = true, node, time.Time{}
	}
	sr.seen = now
	if now.Before(sr.due) {
		return false
	}
	sr.due = now.Add(feedAnswerTimeout)
	return true
}

// feedPage advances site's reconciliation cursor past page when page
// continues it, and sets when the leader is asked next: at once while the
// feed goes on, after ReconcileInterval when page was its last. A page
// that does not continue the cursor (a repeated or a late one) moves
// nothing: its rows are stored, and the next ask reads from the cursor.
func (s *Service) feedPage(ctx context.Context, site string, page ports.FeedPage, now time.Time) error {
	s.relay.mu.Lock()
	sr := s.relay.site(site)
	s.relay.mu.Unlock()
	sr.feedMu.Lock()
	defer sr.feedMu.Unlock()
	c, err := s.siteCalls.SiteCursor(ctx, site)
	if err != nil {
		return fmt.Errorf("report operations of site %.64q: read the cursor: %w", site, err)
	}
	if !continues(c, page) {
		s.log.Debug("a feed page does not continue the site's cursor; its rows are stored, the cursor stays",
			"site", site, "epoch", page.Epoch, "cursor_epoch", c.Epoch)
		return nil
	}
	if err := s.siteCalls.SetSiteCursor(ctx, site, ports.SiteCursor{Epoch: page.Epoch, After: page.Next}); err != nil {
		return fmt.Errorf("report operations of site %.64q: store the cursor: %w", site, err)
	}
	if page.Last {
		s.relay.setDue(site, now.Add(s.cfg.ReconcileInterval))
		return nil
	}
	s.relay.setDue(site, time.Time{})
	s.relay.wake()
	return nil
}

// Sync implements ports.Central. It records the node's health; from a
// leader it takes the answers, then waits (at most req.Wait, capped at
// MaxSyncWait and at two thirds of Config.SiteStaleAfter, so that a
// leader's long polls alone keep its site connected) until there are
// commands to relay or a feed page to ask for. A wait ends early with the
// context, answering empty.
func (s *Service) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	if s.siteCalls == nil {
		return ports.SyncAnswer{}, errNoMirror
	}
	h, err := checkSync(req)
	if err != nil {
		return ports.SyncAnswer{}, err
	}
	now := s.clock.Now()
	if err := s.siteCalls.RecordSiteHealth(ctx, ports.SiteNodeHealth{SiteHealth: h, ReportedAt: now}); err != nil {
		return ports.SyncAnswer{}, fmt.Errorf("sync of site %.64q: record health: %w", req.Site, err)
	}
	if !req.Leads {
		return ports.SyncAnswer{}, nil
	}
	for _, a := range req.Answers {
		err := s.siteCalls.FinishSiteCommand(ctx, req.Site, a.ID, a.State, truncateText(a.Result, ports.MaxSiteCallErrorBytes), now)
		switch {
		case errors.Is(err, ports.ErrConflict), errors.Is(err, ports.ErrNotFound):
			// Answered before (a Sync repeated), or not this site's.
			s.log.Debug("a site's answer to a command is not taken", "site", req.Site, "command", a.ID, "err", err)
		case err != nil:
			return ports.SyncAnswer{}, fmt.Errorf("sync of site %.64q: record the answer to command %.64q: %w", req.Site, a.ID, err)
		case a.State == ports.CommandRefused:
			s.log.Info("a site refused a command", "site", req.Site, "command", a.ID, "reason", truncateText(a.Result, ports.MaxSiteCallErrorBytes))
		}
	}
	return s.poll(ctx, req.Site, h.Node, min(req.Wait, ports.MaxSyncWait, s.cfg.SiteStaleAfter*2/3))
}

// checkSync checks a Sync and returns the health to record, named after
// the calling site.
func checkSync(req ports.SyncRequest) (ports.SiteHealth, error) {
	h := req.Health
	switch {
	case req.Site == "":
		return h, fmt.Errorf("sync: the site is not named: %w", ports.ErrInvalid)
	case h.Site != "" && h.Site != req.Site:
		return h, fmt.Errorf("sync of site %.64q: the health names site %.64q: %w", req.Site, h.Site, ports.ErrInvalid)
	case req.Wait < 0:
		return h, fmt.Errorf("sync of site %.64q: the wait %s is negative: %w", req.Site, req.Wait, ports.ErrInvalid)
	case len(req.Answers) > maxSyncAnswers:
		return h, fmt.Errorf("sync of site %.64q: %d answers exceed the limit of %d: %w",
			req.Site, len(req.Answers), maxSyncAnswers, ports.ErrInvalid)
	}
	h.Site = req.Site
	if err := ports.ValidateSiteHealth(h); err != nil {
		return h, fmt.Errorf("sync of site %.64q: %w", req.Site, err)
	}
	for _, a := range req.Answers {
		if a.ID == "" || len(a.ID) > ports.MaxSiteCallIDBytes || !utf8.ValidString(a.ID) ||
			(a.State != ports.CommandApplied && a.State != ports.CommandRefused) {
			return h, fmt.Errorf("sync of site %.64q: the answer to command %.64q is malformed (an id of 1 to %d bytes, Applied or Refused): %w",
				req.Site, a.ID, ports.MaxSiteCallIDBytes, ports.ErrInvalid)
		}
	}
	return h, nil
}

// truncateText cuts s to at most n bytes, on a rune boundary.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// poll answers what central asks of site's leader node now, else waits
// for it: woken by a command requested on this node, looking in the store
// every syncPollInterval for one requested on another, until wait is over
// or ctx ends.
func (s *Service) poll(ctx context.Context, site, node string, wait time.Duration) (ports.SyncAnswer, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(syncPollInterval)
	defer tick.Stop()
	for {
		woken := s.relay.signal()
		ans, err := s.ask(ctx, site, node)
		if err != nil && ctx.Err() != nil {
			return ports.SyncAnswer{}, nil // the caller left
		}
		if err != nil || len(ans.Commands) > 0 || ans.Feed != nil || timeout == nil {
			return ans, err
		}
		select {
		case <-ctx.Done():
			return ports.SyncAnswer{}, nil
		case <-timeout:
			return ports.SyncAnswer{}, nil
		case <-tick.C:
		case <-woken:
		}
	}
}

// ask returns the commands pending for site and, when its leader node is
// due for one, the feed page to send.
func (s *Service) ask(ctx context.Context, site, node string) (ports.SyncAnswer, error) {
	cmds, err := s.siteCalls.PendingSiteCommands(ctx, site, maxSyncCommands)
	if err != nil {
		return ports.SyncAnswer{}, fmt.Errorf("sync of site %.64q: pending commands: %w", site, err)
	}
	ans := ports.SyncAnswer{Commands: cmds}
	if !s.relay.takeFeed(site, node, s.clock.Now(), s.cfg.SiteStaleAfter) {
		return ans, nil
	}
	c, err := s.siteCalls.SiteCursor(ctx, site)
	if err != nil {
		s.relay.setDue(site, time.Time{})
		return ports.SyncAnswer{}, fmt.Errorf("sync of site %.64q: read the cursor: %w", site, err)
	}
	ans.Feed = &c
	return ans, nil
}

// RetrySiteCalls implements ports.SiteCalls.
func (s *Service) RetrySiteCalls(ctx context.Context, a ports.SiteCallAction) (ports.SiteCallActionResult, error) {
	return s.relayAction(ctx, a, ports.SiteRetry, "retried")
}

// DiscardSiteCalls implements ports.SiteCalls.
func (s *Service) DiscardSiteCalls(ctx context.Context, a ports.SiteCallAction) (ports.SiteCallActionResult, error) {
	return s.relayAction(ctx, a, ports.SiteDiscard, "discarded")
}

// siteCallFilterEmpty reports whether f selects every row.
func siteCallFilterEmpty(f ports.SiteCallFilter) bool {
	return f.Site == "" && f.Kind == "" && f.Target == "" && len(f.Statuses) == 0 && f.CreatedFrom.IsZero() &&
		f.CreatedTo.IsZero() && f.UpdatedFrom.IsZero() && f.UpdatedTo.IsZero() && f.ReportedTo.IsZero() && f.Keyword == ""
}

// relayAction stores a command of action for each selected row that is
// Parked at central's mirror and has no command pending; the others are
// refused with the reason. The rows' status is left to the sites' reports.
func (s *Service) relayAction(ctx context.Context, a ports.SiteCallAction, action ports.SiteCommandAction,
	verb string) (ports.SiteCallActionResult, error) {
	var res ports.SiteCallActionResult
	if s.siteCalls == nil {
		return res, errNoMirror
	}
	if err := checkOperator(a.Actor, "the commands' history"); err != nil {
		return res, err
	}
	if len(a.Keys) == 0 && !a.All && siteCallFilterEmpty(a.Filter) {
		return res, fmt.Errorf("select site calls by keys or by a filter (or ask for all explicitly): %w", ports.ErrInvalid)
	}
	if len(a.Keys) > ports.MaxSiteCallBulk {
		return res, fmt.Errorf("%d site calls exceed the limit of %d: %w", len(a.Keys), ports.MaxSiteCallBulk, ports.ErrInvalid)
	}
	if err := validSiteCallFilter(a.Filter); err != nil {
		return res, err
	}
	rows, refused, err := s.selectSiteCalls(ctx, a)
	if err != nil {
		return res, fmt.Errorf("%s site calls: %w", verb, err)
	}
	res.Refused = refused
	now := s.clock.Now()
	var cmds []ports.SiteCommand
	for _, c := range rows {
		key := ports.SiteCallKey{Site: c.Site, ID: c.ID}
		switch {
		case c.Status != ports.OpParked:
			res.Refused = append(res.Refused, ports.SiteCallRefusal{SiteCallKey: key,
				Reason: fmt.Sprintf("site call %s of site %s is %s; only Parked calls can be %s", c.ID, c.Site, c.Status, verb)})
		case c.Requested != "":
			res.Refused = append(res.Refused, ports.SiteCallRefusal{SiteCallKey: key,
				Reason: fmt.Sprintf("site call %s of site %s has a %s requested by %s at %s, not yet reported done",
					c.ID, c.Site, c.Requested, c.RequestedBy, c.RequestedAt.UTC().Format(time.RFC3339))})
		default:
			id, err := uuid.NewV7()
			if err != nil {
				return res, fmt.Errorf("%s site calls: make a command id: %w", verb, err)
			}
			cmds = append(cmds, ports.SiteCommand{ID: id.String(), Site: c.Site, OperationID: c.ID, Action: action,
				Actor: a.Actor, RequestedAt: now, State: ports.CommandRequested})
		}
	}
	for part := range slices.Chunk(cmds, commandChunk) {
		if err := s.siteCalls.RequestSiteCommands(ctx, part); err != nil {
			if len(res.Requested) > 0 {
				s.relay.wake()
			}
			return res, fmt.Errorf("%s site calls: request commands: %w", verb, err)
		}
		for _, c := range part {
			res.Requested = append(res.Requested, ports.SiteCallKey{Site: c.Site, ID: c.OperationID})
		}
	}
	if len(res.Requested) > 0 {
		s.relay.wake()
		s.log.Info("operator action on site calls", "action", verb, "actor", a.Actor, "rows", len(res.Requested),
			"refused", len(res.Refused))
	}
	return res, nil
}

// selectSiteCalls returns the mirror rows a selects: its keys (those
// unknown refused), or the Parked rows its filter matches.
func (s *Service) selectSiteCalls(ctx context.Context, a ports.SiteCallAction) ([]ports.SiteCall, []ports.SiteCallRefusal, error) {
	var rows []ports.SiteCall
	var refused []ports.SiteCallRefusal
	if len(a.Keys) > 0 {
		seen := make(map[ports.SiteCallKey]bool, len(a.Keys))
		for _, k := range a.Keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			c, err := s.siteCalls.GetSiteCall(ctx, k.Site, k.ID)
			switch {
			case errors.Is(err, ports.ErrNotFound):
				refused = append(refused, ports.SiteCallRefusal{SiteCallKey: k,
					Reason: fmt.Sprintf("site call %.64q of site %.64q is not known at central", k.ID, k.Site)})
			case err != nil:
				return nil, nil, err
			default:
				rows = append(rows, c)
			}
		}
		return rows, refused, nil
	}
	f := a.Filter
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, ports.OpParked) {
		return nil, nil, nil
	}
	f.Statuses = []ports.OpStatus{ports.OpParked}
	page := ports.PageRequest{Limit: MaxPageSize}
	for {
		p, err := s.siteCalls.QuerySiteCalls(ctx, f, page)
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, p.Items...)
		if len(rows) > ports.MaxSiteCallBulk {
			return nil, nil, fmt.Errorf("the filter selects more than %d parked calls; narrow it: %w", ports.MaxSiteCallBulk, ports.ErrInvalid)
		}
		if p.Next == "" {
			return rows, nil, nil
		}
		page.After = p.Next
	}
}
