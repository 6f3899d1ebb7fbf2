package ports_test

import (
	"testing"

	"github.com/siteline/outbox/ports"
)

// TestMaskURLCredentials: the reviewer's token_url and its kin show no
// credential once masked, and masking twice changes nothing.
func TestMaskURLCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:PASSWORD123@idp.example.com/token?api_key=KEY123&scope=mail": "http://***@idp.example.com/token?api_key=***&scope=mail",
		"https://ghp_TOKEN@api.example.com/x":                                     "https://***@api.example.com/x",
		"https://h.example.com/p?sig=S1&se=2030&access_token=T&X-Api-Key=K#frag":  "https://h.example.com/p?sig=***&se=2030&access_token=***&X-Api-Key=***#frag",
		"https://login.example.com/tenant/oauth2/v2.0/token":                      "https://login.example.com/tenant/oauth2/v2.0/token",
		"smtp.example.com":     "smtp.example.com",
		"a@b":                  "a@b",
		"mailto:ops@x.example": "mailto:ops@x.example",
		"":                     "",
	} {
		got := ports.MaskURLCredentials(in)
		if got != want {
			t.Errorf("MaskURLCredentials(%q) = %q, want %q", in, got, want)
		}
		if again := ports.MaskURLCredentials(got); again != got {
			t.Errorf("masking %q twice gives %q", got, again)
		}
	}
}

func TestMaskEmails(t *testing.T) {
	for in, want := range map[string]string{
		`from "alerts@plant.example.com" → "ops@plant.example.com"`: `from "a***@plant.example.com" → "o***@plant.example.com"`,
		"username=svc.outbox@corp.example":                          "username=s***@corp.example",
		"no address here":                                           "no address here",
	} {
		if got := ports.MaskEmails(in); got != want || ports.MaskEmails(got) != got {
			t.Errorf("MaskEmails(%q) = %q, want %q", in, got, want)
		}
	}
}
