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

// TestChannelFormInputs: each setting of a schema gets the input of its
// kind, a stored list is shown one value a line, and a type without a
// schema gets its settings as key=value lines.
func TestChannelFormInputs(t *testing.T) {
	s := &Server{cfg: Config{ChannelSchema: func(typ string) ([]ChannelSetting, bool) {
		if typ != "x" {
			return nil, typ == "free"
		}
		return []ChannelSetting{
			{Name: "on", Kind: "bool"}, {Name: "n", Kind: "number"}, {Name: "d", Kind: "duration"},
			{Name: "l", Kind: "list"}, {Name: "e", Allowed: []string{"a", "b"}, Kind: "number"},
			{Name: "k", Secret: true, Kind: "number"}, {Name: "t"}, {Name: "future", Kind: "colour"},
		}, true
	}}}
	v := s.newChannelForm("x", ports.ChannelSettings{Settings: map[string]string{"l": "a, b,,c", "on": "true"}})
	got := map[string]string{}
	for _, in := range v.Inputs {
		got[in.Name] = in.Input + " " + strings.Join(in.Options, "|") + " " + in.Value
	}
	want := map[string]string{"on": "select true|false true", "n": "number  ", "d": "duration  ", "l": "list  a\nb\nc",
		"e": "select a|b ", "k": "secret  ", "t": "text  ", "future": "text  "}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("setting %s: input %q, want %q", k, got[k], w)
		}
	}
	free := s.newChannelForm("free", ports.ChannelSettings{Settings: map[string]string{"b": "2", "a": "1"}})
	if free.Schema || !free.Plugin || free.Free != "a=1\nb=2\n" {
		t.Errorf("a type without a schema: %+v", free)
	}
	if none := s.newChannelForm("none", ports.ChannelSettings{}); none.Plugin || none.Schema {
		t.Errorf("a type no plugin delivers: %+v", none)
	}
}
