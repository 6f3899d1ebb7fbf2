package channel

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
)

// This file converts between the plain Go types of the contract and their
// protobuf wire form, in both directions.

func requestToPB(r Request, timeout time.Duration) *pb.Delivery {
	n := r.Notification
	var created int64
	if !n.CreatedAt.IsZero() {
		created = n.CreatedAt.UnixMicro()
	}
	return &pb.Delivery{
		Notification: &pb.Notification{
			Id: n.ID, List: n.List, Subject: n.Subject, Body: n.Body, TypeData: n.TypeData,
			Priority: int64(n.Priority), SourceSite: n.SourceSite, CreatedAtUnixMicros: created,
			Attempt: int64(n.Attempt),
		},
		Targets:       r.Targets,
		Settings:      r.Settings,
		TimeoutMicros: timeout.Microseconds(),
	}
}

func requestFromPB(d *pb.Delivery) Request {
	n := d.GetNotification()
	var created time.Time
	if us := n.GetCreatedAtUnixMicros(); us != 0 {
		created = time.UnixMicro(us).UTC()
	}
	return Request{
		Notification: Notification{
			ID: n.GetId(), List: n.GetList(), Subject: n.GetSubject(), Body: n.GetBody(),
			TypeData: n.GetTypeData(), Priority: int(n.GetPriority()), SourceSite: n.GetSourceSite(),
			CreatedAt: created, Attempt: int(n.GetAttempt()),
		},
		Targets:  d.GetTargets(),
		Settings: d.GetSettings(),
	}
}

func resultToPB(r Result) *pb.Result {
	o := pb.Outcome_OUTCOME_TRANSIENT
	switch r.Outcome {
	case Success:
		o = pb.Outcome_OUTCOME_SUCCESS
	case Permanent:
		o = pb.Outcome_OUTCOME_PERMANENT
	}
	return &pb.Result{Outcome: o, ResolvedTargets: r.ResolvedTargets, Error: r.Error,
		RetryAfterMicros: r.RetryAfter.Microseconds()}
}

// MaxErrorBytes bounds the error text of a result central takes from a
// plugin; a longer one is cut (at a character boundary) and marked "…".
const MaxErrorBytes = 4096

// MaxRetryAfter bounds the RetryAfter of a result central takes from a
// plugin: a longer wait is cut to it, a negative one is none.
const MaxRetryAfter = 24 * time.Hour

// resultFromPB is the result a plugin sent, as central takes it: an outcome
// it does not know is Transient, RetryAfter is within [0, MaxRetryAfter],
// and the error text is valid UTF-8 without NUL bytes and at most
// MaxErrorBytes long, so that no plugin's answer can keep central from
// recording it.
func resultFromPB(r *pb.Result) Result {
	o := Transient
	switch r.GetOutcome() {
	case pb.Outcome_OUTCOME_SUCCESS:
		o = Success
	case pb.Outcome_OUTCOME_PERMANENT:
		o = Permanent
	}
	retry := time.Duration(0)
	if us := r.GetRetryAfterMicros(); us > 0 {
		retry = MaxRetryAfter
		if us < MaxRetryAfter.Microseconds() {
			retry = time.Duration(us) * time.Microsecond
		}
	}
	return Result{Outcome: o, ResolvedTargets: r.GetResolvedTargets(), Error: cleanText(r.GetError(), MaxErrorBytes),
		RetryAfter: retry}
}

// cleanText returns s as valid UTF-8 without NUL bytes, cut to at most limit
// bytes at a character boundary (with "…" when cut).
func cleanText(s string, limit int) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && len(s) <= limit {
		return s
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= limit {
		return s
	}
	const ellipsis = "…"
	cut := limit - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

func descriptionToPB(d Description) *pb.DescribeResponse {
	out := &pb.DescribeResponse{Name: d.Name, Version: d.Version, Implemented: true}
	for _, s := range d.Settings {
		out.Settings = append(out.Settings, &pb.Setting{Name: s.Name, Description: s.Description,
			Required: s.Required, Secret: s.Secret, Default: s.Default, Allowed: s.Allowed})
	}
	return out
}

func descriptionFromPB(r *pb.DescribeResponse) Description {
	d := Description{Name: r.GetName(), Version: r.GetVersion()}
	for _, s := range r.GetSettings() {
		d.Settings = append(d.Settings, Setting{Name: s.GetName(), Description: s.GetDescription(),
			Required: s.GetRequired(), Secret: s.GetSecret(), Default: s.GetDefault(), Allowed: s.GetAllowed()})
	}
	return d
}
