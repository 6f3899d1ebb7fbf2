package smtpcapture

import (
	"net/smtp"
	"os"
	"strings"
	"testing"
	"time"
)

func TestCapturesOverTCP(t *testing.T) {
	dir := t.TempDir() + "/mail"
	s, err := Start(Config{Keep: 2, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, to := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		msg := "Subject: n" + string(rune('0'+i)) + "\r\n\r\nbody\r\n"
		if err := smtp.SendMail(s.Addr(), nil, "outbox@example.com", []string{to}, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	if err := s.Wait(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got := s.Messages()
	if len(got) != 2 || got[0].To[0] != "b@example.com" || got[1].To[0] != "c@example.com" ||
		got[1].From != "outbox@example.com" || !strings.Contains(string(got[1].Data), "Subject: n2") {
		t.Fatalf("kept %+v", got)
	}
	if got[1].At.IsZero() || time.Since(got[1].At) > time.Minute {
		t.Errorf("At = %v", got[1].At)
	}
	// Every message is in the directory, not only those kept in memory.
	b, err := os.ReadFile(dir + "/000001.eml")
	if err != nil || !strings.Contains(string(b), "Subject: n0") {
		t.Errorf("first message file: %v %q", err, b)
	}
	if _, err := os.Stat(dir + "/000003.eml"); err != nil {
		t.Errorf("third message file: %v", err)
	}
}

// Close right after Start must not hang (Serve may not have started yet).
func TestCloseAtOnce(t *testing.T) {
	for range 20 {
		s, err := Start(Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRejectListAndParse: a recipient on the reject list is refused with a
// 5xx at RCPT (so a channel parks the notification), others are kept; the
// kept message's subject and quoted-printable body decode for display.
func TestRejectListAndParse(t *testing.T) {
	s, err := Start(Config{Reject: []string{"bounce@example.com", "@nowhere.example"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, to := range []string{"Bounce@Example.com", "x@nowhere.example"} {
		err := smtp.SendMail(s.Addr(), nil, "outbox@example.com", []string{to}, []byte("Subject: x\r\n\r\nx\r\n"))
		if err == nil || !strings.Contains(err.Error(), "550") {
			t.Fatalf("%s: %v, want a 550", to, err)
		}
	}
	msg := "Subject: =?utf-8?q?Pump_=C3=A9tat?=\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nline one=\r\n continues =C3=A9\r\n"
	if err := smtp.SendMail(s.Addr(), nil, "outbox@example.com", []string{"ok@example.com"}, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	got := s.Messages()
	if len(got) != 1 {
		t.Fatalf("kept %d messages, want only the accepted one", len(got))
	}
	subject, body := got[0].Parse()
	if subject != "Pump état" || body != "line one continues é\r\n" {
		t.Fatalf("parsed %q %q", subject, body)
	}
}

// TestDataDelay: with DataDelay set, the reply to the end of DATA comes no
// sooner than DataDelay after the data, and the message is stamped then.
func TestDataDelay(t *testing.T) {
	const delay = 500 * time.Millisecond
	s, err := Start(Config{DataDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("outbox@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("ops@example.com"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("Subject: slow\r\n\r\nbody\r\n")); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	if err := w.Close(); err != nil { // sends the end of DATA, reads the reply
		t.Fatal(err)
	}
	if took := time.Since(sent); took < delay {
		t.Errorf("the end of DATA was answered after %s, want at least %s", took, delay)
	}
	got := s.Messages()
	if len(got) != 1 {
		t.Fatalf("kept %d messages, want 1", len(got))
	}
	if at := got[0].At.Sub(sent); at < delay {
		t.Errorf("the message is stamped %s after the end of DATA, want at least %s", at, delay)
	}
}
