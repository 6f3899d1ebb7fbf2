package email

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
)

// TestMain lets the test binary serve as the email plugin of the kit's
// subprocess mode, built as central builds it.
func TestMain(m *testing.M) {
	plugintest.Main(m, map[string]func() channel.Channel{
		Name: func() channel.Channel { return New(channel.Logger()) },
	})
}

// TestKit runs the channel plugin contract kit on the email channel,
// in-process, over gRPC and as a plugin process, against real SMTP servers.
func TestKit(t *testing.T) {
	plugintest.Run(t, plugintest.Target{
		Name:    Name,
		New:     func(*testing.T) channel.Channel { return New(nil) }, // the kit closes it
		Command: plugintest.Reexec(Name),
		Cases:   kitCases,
	})
}

// The credentials of the kit's servers; the password is given in clear, as
// central gives a secret setting once it has resolved its reference.
const (
	kitUser     = "mailer@example.org"
	kitPassword = "kit-Pa55word-Secret"
)

// kitTargets are the recipients of every kit delivery.
var kitTargets = []string{"ops@example.com", "oncall@example.net"}

func kitCases(t *testing.T) []plugintest.Case {
	users := map[string]string{kitUser: kitPassword}
	auth := []string{settingAuth, authPlain, settingUsername, kitUser, settingPassword, kitPassword}
	request := func(settings map[string]string) channel.Request {
		return channel.Request{
			Notification: channel.Notification{
				List:    "operators",
				Subject: "Pump 3 stopped",
				Body:    "Pump 3 stopped at 10:42.\nPlease check.\n.\nA line with a dot above.\n",
				Attempt: 1,
			},
			Targets:  slices.Clone(kitTargets),
			Settings: settings,
		}
	}
	// settingsAt are the settings of a server at addr that is no test SMTP
	// server; connect_timeout leaves the bound to the delivery's deadline.
	settingsAt := func(addr string) map[string]string {
		host, port, _ := net.SplitHostPort(addr)
		m := map[string]string{settingHost: host, settingPort: port, settingTLS: tlsNone,
			settingFrom: "Outbox <outbox@example.org>", settingConnectTimeout: "1m"}
		for i := 0; i+1 < len(auth); i += 2 {
			m[auth[i]] = auth[i+1]
		}
		return m
	}

	ok := newTestServer(t, serverConfig{users: users})
	// Servers that refuse the recipients, echoing them as servers do.
	busy := newTestServer(t, serverConfig{users: users, rcpt: func(to string) error {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0},
			Message: "<" + to + ">: try again later"}
	}})
	unknown := newTestServer(t, serverConfig{users: users, rcpt: func(to string) error {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
			Message: "<" + to + ">: Recipient address rejected: User unknown"}
	}})
	// A server that refuses the second recipient only.
	oneRefused := newTestServer(t, serverConfig{users: users, rcpt: func(to string) error {
		if to != kitTargets[1] {
			return nil
		}
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
			Message: "<" + to + ">: Recipient address rejected: User unknown"}
	}})
	down := plugintest.RefusedAddr(t)
	hang := newHangingServer(t)

	wrongPassword := ok.settings(t, auth...)
	wrongPassword[settingPassword] = "kit-Wrong-Pa55word"
	return []plugintest.Case{
		{Name: "Delivered", Request: request(ok.settings(t, auth...)), Want: channel.Success, Check: ok.kitCheck},
		{Name: "Reply4xx", Request: request(busy.settings(t, auth...)), Want: channel.Transient, Check: wantInError("451")},
		{Name: "Reply5xx", Request: request(unknown.settings(t, auth...)), Want: channel.Permanent, Check: wantInError("550")},
		{Name: "OneRecipientRefused", Request: request(oneRefused.settings(t, auth...)), Want: channel.Permanent,
			WantTargets: []channel.Outcome{channel.Success, channel.Permanent},
			Check: func(t *testing.T, req channel.Request, res channel.Result) {
				t.Helper()
				wantInError("550")(t, req, res)
				// The accepted recipient got the message all the same.
				got, _, err := oneRefused.messageByID(req.Notification.ID)
				if err != nil {
					t.Errorf("notification %s: %v", req.Notification.ID, err)
				} else if !slices.Equal(got.rcpts, kitTargets[:1]) {
					t.Errorf("notification %s: RCPT TO %q, want %q", req.Notification.ID, got.rcpts, kitTargets[:1])
				}
			}},
		{Name: "AuthRefused", Request: request(wrongPassword), Want: channel.Permanent, Check: wantInError("535")},
		{Name: "ServerDown", Request: request(settingsAt(down)), Want: channel.Transient},
		{Name: "ServerHangs", Request: request(settingsAt(hang.addr)), Want: channel.Transient,
			Timeout: 300 * time.Millisecond},
		{Name: "InvalidTLSMode", Request: request(ok.settings(t, append(auth, settingTLS, "ssl3")...)),
			Want: channel.Permanent},
	}
}

// wantInError checks that the error text holds s (an SMTP reply code).
func wantInError(s string) func(*testing.T, channel.Request, channel.Result) {
	return func(t *testing.T, _ channel.Request, res channel.Result) {
		t.Helper()
		if !strings.Contains(res.Error, s) {
			t.Errorf("the error %q does not hold %s", res.Error, s)
		}
	}
}

// kitCheck checks that the message of req reached the server, found by its
// Message-ID, with req's subject and body, from the kit's user to req's
// targets. It runs on any goroutine.
func (s *testServer) kitCheck(t *testing.T, req channel.Request, res channel.Result) {
	t.Helper()
	id := req.Notification.ID
	got, msg, err := s.messageByID(id)
	if err != nil {
		t.Errorf("notification %s: %v", id, err)
		return
	}
	if got.from != "outbox@example.org" || got.user != kitUser || !slices.Equal(got.rcpts, req.Targets) {
		t.Errorf("notification %s: MAIL FROM %q as %q to %q; want outbox@example.org as %s to %q",
			id, got.from, got.user, got.rcpts, kitUser, req.Targets)
	}
	if !slices.Equal(res.ResolvedTargets, req.Targets) {
		t.Errorf("notification %s: resolved %q, want %q", id, res.ResolvedTargets, req.Targets)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Errorf("notification %s: decode the subject %q: %v", id, msg.Header.Get("Subject"), err)
	} else if want := strings.Map(oneLine, req.Notification.Subject); subject != want {
		t.Errorf("notification %s: subject %q, want %q", id, subject, want)
	}
	body, err := textBody(msg)
	if err != nil {
		t.Errorf("notification %s: %v", id, err)
		return
	}
	// SMTP lines end in CRLF; a message may end with one more line break.
	body = strings.ReplaceAll(body, "\r\n", "\n")
	if want := req.Notification.Body; strings.TrimRight(body, "\n") != strings.TrimRight(want, "\n") {
		t.Errorf("notification %s: a body of %d bytes, want %d bytes:\n%.200q\nwant\n%.200q",
			id, len(body), len(want), body, want)
	}
}

// messageByID returns the message the server received whose Message-ID
// holds the notification id id, and its parsed form.
func (s *testServer) messageByID(id string) (received, *netmail.Message, error) {
	for _, r := range s.messages() {
		msg, err := netmail.ReadMessage(bytes.NewReader(r.data))
		if err != nil {
			return received{}, nil, fmt.Errorf("a message the server received does not parse: %w", err)
		}
		if mid := msg.Header.Get("Message-Id"); strings.HasPrefix(mid, "<"+id+"@") {
			return r, msg, nil
		}
	}
	return received{}, nil, fmt.Errorf("no message with its Message-ID reached the server")
}

// textBody returns the decoded text of a text/plain message in UTF-8.
func textBody(msg *netmail.Message) (string, error) {
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		return "", fmt.Errorf("Content-Type %q: %w", msg.Header.Get("Content-Type"), err)
	}
	if mediaType != "text/plain" {
		return "", fmt.Errorf("Content-Type %q, want text/plain", mediaType)
	}
	if cs := params["charset"]; cs != "" && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return "", fmt.Errorf("charset %q, want UTF-8", cs)
	}
	var r io.Reader = msg.Body
	switch cte := strings.ToLower(strings.TrimSpace(msg.Header.Get("Content-Transfer-Encoding"))); cte {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r) // it skips the line breaks
	case "", "7bit", "8bit", "binary":
	default:
		return "", fmt.Errorf("Content-Transfer-Encoding %q", cte)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", fmt.Errorf("decode the body: %w", err)
	}
	return string(b), nil
}
