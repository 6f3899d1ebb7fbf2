package httpapi

import (
	"net/url"
	"strings"
	"testing"

	"github.com/siteline/outbox/ports"
)

// FuzzChannelForm: whatever a channel form posts, reading it never panics,
// a secret setting given in clear is refused, and neither the error nor
// the form shown again holds that value.
func FuzzChannelForm(f *testing.F) {
	schema := []ChannelSetting{
		{Name: "host", Required: true}, {Name: "port", Kind: "number"}, {Name: "tls", Allowed: []string{"none", "starttls"}},
		{Name: "password", Secret: true}, {Name: "scopes", Kind: "list"}, {Name: "timeout", Kind: "duration"},
	}
	f.Add("email", "setting.host=h&setting.password=hunter2&max_retries=3&interval=1m")
	f.Add("email", "setting.password=env:X&setting.scopes=a%0Ab&rate_limit=2.5&backoff=exponential")
	f.Add("free", "settings=api_token%3Dhunter2%0Aregion%3Deu%0Anoequals")
	f.Add("free", "max_interval=1e9h&rate_limit=NaN&max_retries=99999999999999999999")
	f.Fuzz(func(t *testing.T, typ, body string) {
		vals, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		s := &Server{cfg: Config{ChannelSchema: func(typ string) ([]ChannelSetting, bool) {
			if typ == "email" {
				return schema, true
			}
			return nil, true
		}}}
		in, v, err := s.channelFromForm(typ, vals)
		secrets := map[string]bool{}
		if v.Schema {
			if p := strings.TrimSpace(vals.Get("setting.password")); p != "" && !ports.IsSecretRef(p) {
				secrets[p] = true
			}
			for _, st := range v.Inputs {
				if st.Secret && st.Value != "" && !ports.IsSecretRef(strings.TrimSpace(st.Value)) {
					t.Fatalf("the form shows a secret in clear: %q", st.Value)
				}
			}
		} else {
			for _, l := range formLines(vals.Get("settings")) {
				k, x, _ := strings.Cut(l, "=")
				if x = strings.TrimSpace(x); ports.IsSecretKey(strings.TrimSpace(k)) && x != "" && !ports.IsSecretRef(x) {
					secrets[x] = true
					if strings.Contains(v.Free, l) {
						t.Fatalf("the free settings show a secret in clear: %q", l)
					}
				}
			}
		}
		if len(secrets) > 0 && err == nil {
			t.Fatalf("a secret in clear was accepted: %+v", in.Settings)
		}
		for x := range secrets {
			if len(x) >= 4 && err != nil && strings.Contains(err.Error(), x) {
				t.Fatalf("the error repeats the secret %q: %v", x, err)
			}
		}
	})
}
