package httpdelivertest

import (
	"context"
	"strings"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// denyAll is a policy under which no connection is made: fuzzing never
// touches the network.
var denyAll = func() *channel.NetworkPolicy {
	p, err := channel.NewNetworkPolicy(nil, []string{"0.0.0.0/0", "::/0"})
	if err != nil {
		panic(err)
	}
	return p
}()

// FuzzDelivery fuzzes an HTTP channel's settings and request: timeout and
// the settings names (at most two more) take fuzzed values, and so do the
// notification's subject, body and type data and the path and query of its
// one target, on an IP address so that no name is resolved. The channel is
// built by build under a policy that denies every address, so nothing is
// sent. Every delivery must be Permanent (refused settings, or the policy's
// refusal; Transient only when the fuzzed timeout ran out first), and its
// error must hold neither a secret setting's value nor the target's path and
// query.
func FuzzDelivery(f *testing.F, build func(*channel.NetworkPolicy) Channel, names ...string) {
	if len(names) > 2 {
		f.Fatalf("FuzzDelivery: at most two settings besides timeout, got %v", names)
	}
	f.Add("", "", "", "Alarm", "Pump 3 stopped.", []byte(nil), "hook")
	f.Add("10s", "whsec_dGVzdA==", ":bell:", "", "", []byte(`{"a":1}`), "services/T0/B0/x?sig=abc")
	f.Add("-1s", "whsec_", "bell", "<b>", "&<>", []byte(`{`), "%zz")
	f.Add("1ns", "\x00", ":::", "\xff", "\u2028", []byte(`null`), "a b")
	ch := build(denyAll)
	desc, err := ch.Describe(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	secret := map[string]bool{}
	for _, s := range desc.Settings {
		secret[s.Name] = s.Secret
	}
	f.Cleanup(ch.Close)
	f.Fuzz(func(t *testing.T, timeout, a, b, subject, body string, typeData []byte, path string) {
		settings := map[string]string{"timeout": timeout}
		for i, v := range []string{a, b}[:len(names)] {
			settings[names[i]] = v
		}
		target := "http://192.0.2.1/" + KitToken + "/" + path
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := ch.Deliver(ctx, channel.Request{
			Notification: channel.Notification{ID: "0190c1b4-7e6a-7c3e-9d1e-3f2a1b0c9d8e", List: "ops",
				Subject: subject, Body: body, TypeData: typeData, Attempt: 1},
			Targets:  []string{target},
			Settings: settings,
		})
		// A timeout setting so short that it ends before the dial is the
		// one way to a Transient result.
		tooShort := res.Outcome == channel.Transient && strings.HasPrefix(res.Error, "no answer within the timeout of ")
		if res.Outcome != channel.Permanent && !tooShort {
			t.Fatalf("settings %q, target %q: %v (%q), want Permanent", settings, target, res.Outcome, res.Error)
		}
		if strings.Contains(res.Error, KitToken) {
			t.Fatalf("error %q holds the target's path", res.Error)
		}
		for name, v := range settings {
			if secret[name] && len(v) >= 4 && strings.Contains(res.Error, v) {
				t.Fatalf("error %q holds the secret setting %s", res.Error, name)
			}
		}
	})
}
