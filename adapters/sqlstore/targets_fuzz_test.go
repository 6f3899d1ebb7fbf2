package sqlstore

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// refusal is the form of the error that refuses a target's text: it
// names the target by its index only.
var refusal = regexp.MustCompile(`^sqlstore: (target states|audit targets) of n: target 0 holds (a NUL byte|text that is not UTF-8): invalid input$`)

// FuzzTargetStatesRoundTrip writes any texts and numbers as a target's
// state and as an attempt's target (the targets come from lists, the errors
// from channels): what the column can keep reads back equal, times to the
// microsecond; a NUL byte or invalid UTF-8 is ErrInvalid, by an error that
// does not carry the text.
func FuzzTargetStatesRoundTrip(f *testing.F) {
	f.Add("ops@example.test", "Delivered", "", 1, int64(1748856600123456), int64(1748856600123456))
	f.Add("env:OPS_HOOK", "Retrying", "http: 503 \"busy\" — réessayez <&>", 3, int64(-1), int64(0))
	f.Add("https://hooks.example.test/x?a=1&b=\u2028", "Failed", "smtp: 550\n5.1.1", 0, int64(0), int64(0))
	f.Add("a\x00b", "Failed", "", 0, int64(0), int64(0))
	f.Add("ok", "Failed", "\xc3(", 0, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, target, status, text string, attempts int, lastUS, deliveredUS int64) {
		at := func(us int64) time.Time {
			if us == 0 {
				return time.Time{}
			}
			return time.UnixMicro(us).UTC()
		}
		st := ports.TargetState{Target: target, Status: ports.TargetStatus(status), Attempts: attempts, LastError: text,
			LastAttemptAt: at(lastUS), DeliveredAt: at(deliveredUS)}
		sent := ports.AuditTarget{Target: target, Outcome: ports.Outcome(status), Error: text}
		storable := true
		for _, s := range []string{target, status, text} {
			storable = storable && utf8.ValidString(s) && !strings.Contains(s, "\x00")
		}
		v, err := encodeTargetStates("n", []ports.TargetState{st})
		a, aerr := encodeAuditTargets("n", []ports.AuditTarget{sent})
		if !storable {
			for _, e := range []error{err, aerr} {
				if !errors.Is(e, ports.ErrInvalid) || !refusal.MatchString(e.Error()) {
					t.Fatalf("encode of %q, %q, %q: %v, want ErrInvalid without the target", target, status, text, e)
				}
			}
			return
		}
		if err != nil || aerr != nil {
			t.Fatalf("encode of %q, %q, %q: %v, %v", target, status, text, err, aerr)
		}
		got, err := decodeTargetStates("n", v)
		if err != nil || len(got) != 1 || got[0].Target != st.Target || got[0].Status != st.Status ||
			got[0].Attempts != st.Attempts || got[0].LastError != st.LastError ||
			!got[0].LastAttemptAt.Equal(st.LastAttemptAt) || !got[0].DeliveredAt.Equal(st.DeliveredAt) {
			t.Fatalf("state %+v stored as %s reads back as %+v, %v", st, v, got, err)
		}
		back, err := decodeAuditTargets("n", a)
		if err != nil || len(back) != 1 || back[0] != sent {
			t.Fatalf("audit target %+v stored as %s reads back as %+v, %v", sent, a, back, err)
		}
	})
}
