package smtpcapture

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse: whatever a client sends the capture, its display form is valid
// UTF-8 of bounded size, and a body without a transfer encoding, or one
// that does not decode, is shown as received.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"Subject: =?utf-8?q?Pump_=C3=A9tat?=\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nline one=\r\n continues =C3=A9\r\n",
		"Subject: hi\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8gd29ybGQ=\r\n",
		"Subject: hi\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8g!!!d29ybGQ=\r\n",
		"Subject: =?iso-8859-1?q?=FF?=\r\n\r\n\xff\xfe body\r\n",
		"Subject: =?x-unknown?b?AAAA?=\r\n\r\nbody",
		"no header at all",
		"Subject: x\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n=ZZ broken\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		subject, body := Message{Data: data}.Parse()
		if !utf8.ValidString(subject) || !utf8.ValidString(body) {
			t.Fatalf("Parse(%q) = %q, %q: not valid UTF-8", data, subject, body)
		}
		if n := len(subject) + len(body); n > 3*len(data) {
			t.Fatalf("Parse(%q): %d bytes out of %d", data, n, len(data))
		}
		msg, err := mail.ReadMessage(bytes.NewReader(data))
		if err != nil {
			if subject != "" || body != strings.ToValidUTF8(string(data), "\uFFFD") {
				t.Fatalf("Parse(%q) of an unparsable message = %q, %q; want it all as the body", data, subject, body)
			}
			return
		}
		var raw bytes.Buffer
		_, _ = raw.ReadFrom(msg.Body)
		rawBody := strings.ToValidUTF8(raw.String(), "\uFFFD")
		var decoded io.Reader
		switch strings.ToLower(strings.TrimSpace(msg.Header.Get("Content-Transfer-Encoding"))) {
		case "quoted-printable":
			decoded = quotedprintable.NewReader(bytes.NewReader(raw.Bytes()))
		case "base64":
			decoded = base64.NewDecoder(base64.StdEncoding, bytes.NewReader(raw.Bytes()))
		default:
			if body != rawBody {
				t.Fatalf("Parse(%q): body %q, want the raw body %q", data, body, rawBody)
			}
			return
		}
		if _, err := io.ReadAll(decoded); err != nil && body != rawBody {
			t.Fatalf("Parse(%q): an undecodable body shown as %q, want it as received, %q", data, body, rawBody)
		}
	})
}
