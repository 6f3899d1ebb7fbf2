package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/siteline/outbox/ports"
)

// DirectoryEditorConfig configures a DirectoryEditor.
type DirectoryEditorConfig struct {
	// PublicSetting reports that the setting key of channel type typ holds
	// no secret, so that the audit log may show its value (the channel
	// plugin's schema knows). When it is nil or says no, a value is shown
	// only if it is a reference (env:NAME, file:/path); a clear value is
	// masked. A key that names a credential (ports.IsSecretKey) is masked
	// whatever it says.
	PublicSetting func(typ, key string) bool
}

// DirectoryEditor implements ports.DirectoryEditor: every change to a list
// or a channel's settings is written to the directory, then recorded in the
// admin audit log with its actor and a summary of what changed. The summary
// never holds a list's targets (addresses, URLs that may carry a token) nor
// the clear value of a secret setting.
type DirectoryEditor struct {
	// putMu makes a list's check of what is stored and its write one
	// step against the other puts (CreateList's "exists already").
	putMu sync.Mutex
	dir   ports.DirectoryAdmin
	rec   adminRecorder
	cfg   DirectoryEditorConfig
}

var _ ports.DirectoryEditor = (*DirectoryEditor)(nil)

// NewDirectoryEditor returns the audited editor of dir.
func NewDirectoryEditor(dir ports.DirectoryAdmin, audit ports.AdminAudit, clock ports.Clock, cfg DirectoryEditorConfig, logger *slog.Logger) (*DirectoryEditor, error) {
	if dir == nil || audit == nil || clock == nil {
		return nil, errors.New("core: NewDirectoryEditor needs a directory, an admin audit log and a clock")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &DirectoryEditor{dir: dir, rec: adminRecorder{audit: audit, clock: clock, log: logger}, cfg: cfg}, nil
}

// PutList implements ports.DirectoryEditor.
func (e *DirectoryEditor) PutList(ctx context.Context, actor string, l ports.List) (ports.List, error) {
	return e.putList(ctx, actor, l, false)
}

// CreateList implements ports.DirectoryEditor.
func (e *DirectoryEditor) CreateList(ctx context.Context, actor string, l ports.List) (ports.List, error) {
	return e.putList(ctx, actor, l, true)
}

// putList is PutList, or CreateList when create is set.
func (e *DirectoryEditor) putList(ctx context.Context, actor string, l ports.List, create bool) (ports.List, error) {
	if err := checkActor(actor); err != nil {
		return ports.List{}, err
	}
	e.putMu.Lock()
	defer e.putMu.Unlock()
	old, err := e.dir.List(ctx, l.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.List{}, err
	}
	if exists && create {
		return ports.List{}, fmt.Errorf("list %q exists already: %w", l.Name, ports.ErrConflict)
	}
	if err := e.dir.PutList(ctx, l); err != nil {
		return ports.List{}, err
	}
	got, err := e.dir.List(ctx, l.Name)
	if err != nil {
		return ports.List{}, err
	}
	action, summary := ports.AdminCreated, describeList(got)
	if exists {
		action, summary = ports.AdminChanged, listChanges(old, got)
		if summary == "" {
			return got, nil
		}
	}
	return got, e.rec.record(ctx, actor, ports.AdminKindList, got.Name, action, summary)
}

// DeleteList implements ports.DirectoryEditor.
func (e *DirectoryEditor) DeleteList(ctx context.Context, actor, name string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	old, err := e.dir.List(ctx, name)
	if err != nil {
		return err
	}
	if err := e.dir.DeleteList(ctx, old.Name); err != nil {
		return err
	}
	return e.rec.record(ctx, actor, ports.AdminKindList, old.Name, ports.AdminDeleted, "was "+describeList(old))
}

// PutChannel implements ports.DirectoryEditor.
func (e *DirectoryEditor) PutChannel(ctx context.Context, actor string, c ports.ChannelSettings) (ports.ChannelSettings, error) {
	if err := checkActor(actor); err != nil {
		return ports.ChannelSettings{}, err
	}
	old, err := e.dir.ChannelSettings(ctx, c.Type)
	exists := err == nil
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.ChannelSettings{}, err
	}
	if err := e.dir.PutChannel(ctx, c); err != nil {
		return ports.ChannelSettings{}, err
	}
	got, err := e.dir.ChannelSettings(ctx, c.Type)
	if err != nil {
		return ports.ChannelSettings{}, err
	}
	action, summary := ports.AdminCreated, e.describeChannel(got)
	if exists {
		action, summary = ports.AdminChanged, e.channelChanges(old, got)
		if summary == "" {
			return got, nil
		}
	}
	return got, e.rec.record(ctx, actor, ports.AdminKindChannel, got.Type, action, summary)
}

// DeleteChannel implements ports.DirectoryEditor.
func (e *DirectoryEditor) DeleteChannel(ctx context.Context, actor, typ string) error {
	if err := checkActor(actor); err != nil {
		return err
	}
	old, err := e.dir.ChannelSettings(ctx, typ)
	if err != nil {
		return err
	}
	if err := e.dir.DeleteChannel(ctx, old.Type); err != nil {
		return err
	}
	return e.rec.record(ctx, actor, ports.AdminKindChannel, old.Type, ports.AdminDeleted, "was "+e.describeChannel(old))
}

// --- summaries -----------------------------------------------------------------

// describeList says what a list is without its targets, which may be
// addresses or URLs carrying a token.
func describeList(l ports.List) string {
	return "type " + l.Type + ", " + plural(len(l.Targets), "target")
}

// listChanges says how a list changed, "" when it did not.
func listChanges(old, got ports.List) string {
	var parts []string
	if old.Type != got.Type {
		parts = append(parts, "type "+old.Type+" → "+got.Type)
	}
	added, removed := diffCount(old.Targets, got.Targets)
	if added > 0 || removed > 0 {
		parts = append(parts, fmt.Sprintf("targets %d → %d (%d added, %d removed)", len(old.Targets), len(got.Targets), added, removed))
	}
	return joinParts(parts...)
}

// diffCount counts the values of b not in a (added) and of a not in b
// (removed), as multisets.
func diffCount(a, b []string) (added, removed int) {
	n := map[string]int{}
	for _, v := range a {
		n[v]++
	}
	for _, v := range b {
		n[v]--
	}
	for _, c := range n {
		if c < 0 {
			added -= c
		} else {
			removed += c
		}
	}
	return added, removed
}

// describeChannel says what channel settings are, secret values masked.
func (e *DirectoryEditor) describeChannel(c ports.ChannelSettings) string {
	var settings []string
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		settings = append(settings, k+"="+e.settingValue(c.Type, k, c.Settings[k]))
	}
	s := "settings: none"
	if len(settings) > 0 {
		s = "settings: " + strings.Join(settings, ", ")
	}
	return joinParts(s, "retry: "+describeRetry(c.Retry), "rate limit: "+describeRate(c.RateLimit))
}

// channelChanges says how channel settings changed, "" when they did not.
func (e *DirectoryEditor) channelChanges(old, got ports.ChannelSettings) string {
	var settings []string
	keys := map[string]bool{}
	for k := range old.Settings {
		keys[k] = true
	}
	for k := range got.Settings {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		was, hadIt := old.Settings[k]
		now, hasIt := got.Settings[k]
		switch {
		case !hadIt:
			settings = append(settings, k+" added ("+e.settingValue(got.Type, k, now)+")")
		case !hasIt:
			settings = append(settings, k+" removed")
		case was != now:
			settings = append(settings, k+" "+e.settingValue(got.Type, k, was)+" → "+e.settingValue(got.Type, k, now))
		}
	}
	var parts []string
	if len(settings) > 0 {
		parts = append(parts, "settings: "+strings.Join(settings, ", "))
	}
	if old.Retry != got.Retry {
		parts = append(parts, "retry: "+describeRetry(old.Retry)+" → "+describeRetry(got.Retry))
	}
	if old.RateLimit != got.RateLimit {
		parts = append(parts, "rate limit: "+describeRate(old.RateLimit)+" → "+describeRate(got.RateLimit))
	}
	return joinParts(parts...)
}

// settingValue is a setting's value as a summary may show it: a reference
// as written, a clear value only when the setting is known to be public
// (and then with the credentials of a URL in it masked: a token_url's
// user:password@ and api_key=...), otherwise "(hidden)".
func (e *DirectoryEditor) settingValue(typ, key, v string) string {
	switch {
	case v == "":
		return `""`
	case ports.IsSecretRef(v):
		return clipRunes(v, 100)
	case e.cfg.PublicSetting != nil && e.cfg.PublicSetting(typ, key) && !ports.IsSecretKey(key):
		return clipRunes(strconv.Quote(ports.MaskURLCredentials(v)), 100)
	}
	return "(hidden)"
}

func describeRetry(r ports.RetrySettings) string {
	backoff := string(r.Backoff)
	if backoff == "" {
		backoff = string(ports.BackoffFixed)
	}
	s := backoff
	if r.MaxRetries > 0 {
		s += ", " + plural(r.MaxRetries, "retry")
	}
	if r.Interval > 0 {
		s += ", every " + r.Interval.String()
	}
	if r.MaxInterval > 0 {
		s += ", at most " + r.MaxInterval.String()
	}
	return s
}

func describeRate(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}

// plural is "1 target", "2 targets", "2 retries".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		noun = strings.TrimSuffix(noun, "y") + "ie"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
