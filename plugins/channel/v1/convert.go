package channel

import (
	"fmt"
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
	out := &pb.Result{Outcome: outcomeToPB(r.Outcome), ResolvedTargets: r.ResolvedTargets, Error: r.Error,
		RetryAfterMicros: r.RetryAfter.Microseconds()}
	if len(r.Targets) > 0 {
		out.Targets = make([]*pb.TargetResult, len(r.Targets))
		for i, t := range r.Targets {
			out.Targets[i] = &pb.TargetResult{Outcome: outcomeToPB(t.Outcome), Error: t.Error,
				RetryAfterMicros: t.RetryAfter.Microseconds()}
		}
	}
	return out
}

// outcomeToPB is o on the wire; an outcome the contract does not know is
// Transient, as it would be read back.
func outcomeToPB(o Outcome) pb.Outcome {
	switch o {
	case Success:
		return pb.Outcome_OUTCOME_SUCCESS
	case Permanent:
		return pb.Outcome_OUTCOME_PERMANENT
	}
	return pb.Outcome_OUTCOME_TRANSIENT
}

// outcomeFromPB is o as central takes it: one it does not know is
// Transient.
func outcomeFromPB(o pb.Outcome) Outcome {
	switch o {
	case pb.Outcome_OUTCOME_SUCCESS:
		return Success
	case pb.Outcome_OUTCOME_PERMANENT:
		return Permanent
	}
	return Transient
}

// retryAfterFromPB is a wait of us microseconds within [0, MaxRetryAfter].
func retryAfterFromPB(us int64) time.Duration {
	switch {
	case us <= 0:
		return 0
	case us >= MaxRetryAfter.Microseconds():
		return MaxRetryAfter
	}
	return time.Duration(us) * time.Microsecond
}

// MaxErrorBytes bounds the error text of a result central takes from a
// plugin; a longer one is cut (at a character boundary) and marked "…".
const MaxErrorBytes = 4096

// MaxRetryAfter bounds the RetryAfter of a result central takes from a
// plugin: a longer wait is cut to it, a negative one is none.
const MaxRetryAfter = 24 * time.Hour

// resultFromPB is the result a plugin sent for a delivery to targets
// targets, as central takes it: an outcome it does not know is Transient,
// RetryAfter is within [0, MaxRetryAfter], and the error text is valid UTF-8
// without NUL bytes and at most MaxErrorBytes long, so that no plugin's
// answer can keep central from recording it. Per-target answers are bounded
// alike, each of them. Their count must be 0 or targets: any other count is
// a Transient failure of the whole delivery, naming both counts. With one
// answer per target, the overall Outcome, Error and RetryAfter are derived
// from them (see PerTarget), whatever the plugin set, so that the result
// never says two things.
func resultFromPB(r *pb.Result, targets int) Result {
	res := Result{Outcome: outcomeFromPB(r.GetOutcome()), ResolvedTargets: r.GetResolvedTargets(),
		Error: cleanText(r.GetError(), MaxErrorBytes), RetryAfter: retryAfterFromPB(r.GetRetryAfterMicros())}
	wire := r.GetTargets()
	switch {
	case len(wire) == 0:
		return res
	case len(wire) != targets:
		return Result{Outcome: Transient, ResolvedTargets: res.ResolvedTargets,
			Error: fmt.Sprintf("channel plugin answered for %d targets, but the delivery had %d", len(wire), targets)}
	}
	ts := make([]TargetResult, len(wire))
	for i, t := range wire {
		ts[i] = TargetResult{Outcome: outcomeFromPB(t.GetOutcome()), Error: cleanText(t.GetError(), MaxErrorBytes),
			RetryAfter: retryAfterFromPB(t.GetRetryAfterMicros())}
	}
	per := PerTarget(ts)
	per.ResolvedTargets = res.ResolvedTargets
	per.Error = cleanText(per.Error, MaxErrorBytes)
	return per
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
			Required: s.Required, Secret: s.Secret, Default: s.Default, Allowed: s.Allowed, Kind: string(s.Kind)})
	}
	return out
}

func descriptionFromPB(r *pb.DescribeResponse) Description {
	d := Description{Name: r.GetName(), Version: r.GetVersion()}
	for _, s := range r.GetSettings() {
		d.Settings = append(d.Settings, Setting{Name: s.GetName(), Description: s.GetDescription(),
			Required: s.GetRequired(), Secret: s.GetSecret(), Default: s.GetDefault(), Allowed: s.GetAllowed(),
			Kind: Kind(s.GetKind())})
	}
	return d
}
