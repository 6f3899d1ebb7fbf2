// Package channel is version 1 of the contract between outbox central and a
// delivery channel: the interface a channel implements, its plain request and
// response types, and Serve, the one call that runs a channel as a plugin
// process.
//
// A channel delivers notifications of one type (email, webhook, Slack, ...).
// Central runs every channel, built-in or third-party, as a separate process
// through hashicorp/go-plugin over gRPC with mutual TLS. Integrators use only
// the Go types of this package: protobuf stays inside its gRPC glue.
//
//	func main() { channel.Serve(myChannel{}) }
//
// The major version is part of the import path. A change that would break a
// built plugin gets a new version (v2) and a new handshake, and central keeps
// serving v1 plugins.
package channel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Channel delivers notifications of one type. Central calls Deliver from many
// goroutines at once, so an implementation must be safe for concurrent use.
type Channel interface {
	// Deliver makes one delivery attempt and classifies it: Success,
	// Transient (may succeed later: a timeout, a busy server) or Permanent
	// (will never succeed as is: a rejected recipient, a missing setting, an
	// empty target list). It never panics on bad input. ctx carries the
	// attempt's deadline; when it ends, Deliver returns promptly with a
	// Transient result. The Error of a result never holds a secret setting
	// or a target's address. When its targets succeed or fail on their own,
	// it answers for each (PerTarget), so that central retries only the
	// targets that failed; otherwise its one outcome applies to every
	// target.
	Deliver(ctx context.Context, req Request) Result
}

// Describer is implemented by a channel that describes itself, so that
// central can check its settings before the first delivery. A channel that
// does not implement it is described by the name it is configured under.
type Describer interface {
	// Describe returns the channel's name, version and settings schema.
	Describe(ctx context.Context) (Description, error)
}

// Request is one delivery attempt of one notification.
type Request struct {
	// Notification is what to deliver.
	Notification Notification
	// Targets are the notification list's targets, resolved at delivery
	// time: e-mail addresses, webhook URLs. A target the list holds as a
	// reference (env:NAME, file:PATH) arrives as its value.
	Targets []string
	// Settings are the channel's settings (host, port, from, ...). A
	// setting the channel's schema marks Secret arrives with its reference
	// resolved to its value: a channel never reads central's environment or
	// files. Every other setting arrives as written, a reference included,
	// and so does every setting of a channel without a schema (no
	// Describer, or a Description without Settings): declare a setting
	// Secret to get its reference resolved.
	Settings map[string]string
}

// Notification is the part of a notification a channel sees.
type Notification struct {
	// ID is the notification's id, a UUID. It stays the same across the
	// attempts of one notification, so a receiver can drop a repeat.
	ID string
	// List is the name of the list it is addressed to.
	List string
	// Subject and Body are plain text.
	Subject string
	Body    string
	// TypeData is optional channel-specific JSON; nil when absent.
	TypeData []byte
	// Priority is the dispatch priority (higher first, 0 the default).
	Priority int
	// SourceSite is the site that sent it.
	SourceSite string
	// CreatedAt is when central accepted it.
	CreatedAt time.Time
	// Attempt counts delivery attempts, this one included (1 for the first).
	Attempt int
}

// Outcome classifies a delivery attempt.
type Outcome int

const (
	// Transient is a failure that may pass (a timeout, a 4xx SMTP reply, an
	// HTTP 503): central retries per the channel's retry policy. It is the
	// zero value, so a Result left empty is never taken for a delivery.
	Transient Outcome = iota
	// Success means the notification was handed over to every target.
	Success
	// Permanent is a failure that will recur (a rejected recipient, a
	// missing setting): central parks the notification at once.
	Permanent
)

// String returns "Success", "Transient" or "Permanent".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "Success"
	case Transient:
		return "Transient"
	case Permanent:
		return "Permanent"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is a channel's answer to one Request.
type Result struct {
	Outcome Outcome
	// ResolvedTargets is kept so that plugins written against earlier
	// releases still build, and central ignores it: as whom a notification
	// went to, central records the list's targets as the list holds them
	// (a reference stays a reference), never a value a plugin returns. A
	// channel may leave it empty; one that fills it gives a target holding
	// a secret (a webhook URL with a token) in a redacted form, as the
	// built-in channels do, for its own tests and tools.
	ResolvedTargets []string
	// Error describes a failure, without secrets or addresses. Central
	// keeps at most MaxErrorBytes of it, as valid UTF-8 without NUL bytes.
	Error string
	// RetryAfter, when positive on a Transient result, is the earliest the
	// next attempt may run (an HTTP Retry-After, say). Central caps it at
	// MaxRetryAfter.
	RetryAfter time.Duration
	// Targets, when not empty, answers target by target: Targets[i] is the
	// outcome for Request.Targets[i], one per target. Central then records
	// each target's fate: a delivered target gets no later attempt, a
	// failed one is retried or parked on its own. Left empty, Outcome,
	// Error and RetryAfter apply to every target. Build such a result with
	// PerTarget, which also sets Outcome, Error and RetryAfter for a
	// central that reads only those. Central takes a result whose Targets
	// holds another count than Request.Targets as a Transient failure of
	// the whole delivery, and derives the overall fields of one whose count
	// matches from its Targets, as PerTarget does. Each target's Error and
	// RetryAfter are bounded as the result's own are.
	Targets []TargetResult
}

// TargetResult is the answer for one target of a Request.
type TargetResult struct {
	Outcome Outcome
	// Error describes its failure, without secrets or addresses.
	Error string
	// RetryAfter, when positive on a Transient result, is the earliest the
	// next attempt to it may run.
	RetryAfter time.Duration
}

// PerTarget is the result of a delivery answered target by target: rs[i] is
// the answer for Request.Targets[i], and rs must hold one per target (central
// takes a result with another count as a Transient failure of the whole
// delivery). It also sets the result's overall fields, which a central of an
// earlier release reads instead of Targets, from rs:
//   - Outcome is Transient if any target is Transient, else Permanent if any
//     is Permanent, else Success;
//   - Error counts the failed targets and gives the first failure's error
//     ("2 of 5 targets failed: 550 no such user"), or that error alone when
//     every target failed alike; it never names a target, so that it holds
//     no address as long as each target's Error holds none;
//   - RetryAfter is the largest RetryAfter of a Transient target.
//
// With no answer at all (a request without targets) it is a Permanent
// result: there was no target to deliver to.
//
// A channel answers per target when its targets succeed or fail on their own
// (each e-mail recipient the server accepts or refuses, each webhook URL):
// central then records each target's fate, and the next attempt goes only to
// the targets not yet delivered. A channel whose targets share one fate (one
// message to all of them, refused whole) answers one outcome, which applies
// to every target.
func PerTarget(rs []TargetResult) Result {
	if len(rs) == 0 {
		return Fail(errors.New("no target to deliver to"))
	}
	res := Result{Outcome: Success, Targets: rs}
	var failed []string
	for _, r := range rs {
		switch r.Outcome {
		case Success:
			continue
		case Permanent:
			if res.Outcome == Success {
				res.Outcome = Permanent
			}
		default:
			res.Outcome = Transient
			res.RetryAfter = max(res.RetryAfter, r.RetryAfter)
		}
		e := r.Error
		if e == "" {
			e = r.Outcome.String() + " failure"
		}
		failed = append(failed, e)
	}
	res.Error = failureSummary(failed, len(rs))
	return res
}

// failureSummary is the overall error of a delivery to n targets whose
// failed ones gave errs: empty when none failed, the one error when every
// target failed alike, else how many failed and the first error. Targets
// are counted, never named.
func failureSummary(errs []string, n int) string {
	if len(errs) == 0 {
		return ""
	}
	alike := !slices.ContainsFunc(errs[1:], func(e string) bool { return e != errs[0] })
	if alike && len(errs) == n {
		return errs[0]
	}
	return fmt.Sprintf("%d of %d targets failed: %s", len(errs), n, errs[0])
}

// Delivered is a Success result; targets, if given, fill ResolvedTargets,
// which central ignores.
func Delivered(targets ...string) Result {
	return Result{Outcome: Success, ResolvedTargets: targets}
}

// Retry is a Transient result with the error's text.
func Retry(err error) Result { return Result{Outcome: Transient, Error: errText(err)} }

// Fail is a Permanent result with the error's text.
func Fail(err error) Result { return Result{Outcome: Permanent, Error: errText(err)} }

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// Description is a channel's answer to Describe.
type Description struct {
	// Name is the channel type it delivers ("email").
	Name string
	// Version is the plugin's version, for logs and the operator page.
	Version string
	// Settings is the schema of the channel's settings. A setting not in it
	// is refused; an empty schema accepts any settings.
	Settings []Setting
}

// Setting describes one channel setting.
type Setting struct {
	// Name is the key in Request.Settings ("host").
	Name string
	// Description says what the setting does, for people.
	Description string
	// Required settings must be present and not blank.
	Required bool
	// Secret settings hold credentials: central stores only a reference
	// (env:NAME or file:/path) and resolves it at delivery time, within
	// what its configuration allows (secrets.dirs, secrets.env_prefix).
	// Only secret settings are resolved.
	Secret bool
	// Default is the value used when the setting is absent, for people.
	Default string
	// Allowed, when not empty, lists the only values accepted.
	Allowed []string
	// Kind is the type of the value, which Validate checks and the
	// operator page's form follows (a number field, a checkbox, …). The
	// zero Kind is text.
	Kind Kind
}

// Kind is the type of a setting's value. Values travel as text whatever
// their Kind; a Kind this version does not know is taken as text.
type Kind string

// The kinds of setting.
const (
	// KindText is any text.
	KindText Kind = ""
	// KindNumber is a decimal number ("587", "2.5").
	KindNumber Kind = "number"
	// KindBool is true or false.
	KindBool Kind = "bool"
	// KindDuration is a Go duration ("10s", "1m30s").
	KindDuration Kind = "duration"
	// KindList is values separated by commas ("a, b, c").
	KindList Kind = "list"
)

// Check reports whether v is a value of kind k: nil, or an error saying
// what was expected (without v, which may be a secret). Blank values are
// left to Required.
func (k Kind) Check(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	switch k {
	case KindNumber:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return errors.New("must be a number")
		}
	case KindBool:
		if v != "true" && v != "false" {
			return errors.New("must be true or false")
		}
	case KindDuration:
		if _, err := time.ParseDuration(v); err != nil {
			return errors.New(`must be a duration such as "10s" or "1m30s"`)
		}
	}
	return nil
}

// ErrInvalidSettings is wrapped by every error of Description.Validate.
var ErrInvalidSettings = errors.New("invalid channel settings")

// Validate checks settings against the schema and returns one error per
// problem, joined, each wrapping ErrInvalidSettings: a required setting
// missing or blank, a value outside Allowed or not of its Kind, a setting
// the schema does not know. Values are never repeated in the errors (they may be secrets). An
// empty schema accepts any settings.
func (d Description) Validate(settings map[string]string) error {
	if len(d.Settings) == 0 {
		return nil
	}
	var errs []error
	known := make(map[string]bool, len(d.Settings))
	for _, s := range d.Settings {
		known[s.Name] = true
		v, ok := settings[s.Name]
		switch {
		case s.Required && strings.TrimSpace(v) == "":
			errs = append(errs, fmt.Errorf("%s: setting %q is required: %w", d.Name, s.Name, ErrInvalidSettings))
		case ok && v != "" && len(s.Allowed) > 0 && !slices.Contains(s.Allowed, v):
			errs = append(errs, fmt.Errorf("%s: setting %q must be one of %s: %w",
				d.Name, s.Name, strings.Join(s.Allowed, ", "), ErrInvalidSettings))
		case ok && !s.Secret && s.Kind.Check(v) != nil:
			errs = append(errs, fmt.Errorf("%s: setting %q %v: %w", d.Name, s.Name, s.Kind.Check(v), ErrInvalidSettings))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if !known[k] {
			errs = append(errs, fmt.Errorf("%s: unknown setting %q: %w", d.Name, k, ErrInvalidSettings))
		}
	}
	return errors.Join(errs...)
}
