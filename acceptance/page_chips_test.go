package acceptance

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// TestListChipsCappedInChromium: in headless Chromium, a status chip over
// more than 10,000 rows reads "10 000+" (titled with the cap), the others
// their exact count. A screenshot is written for reviewers.
func TestListChipsCappedInChromium(t *testing.T) {
	exe := browserPath(t)
	c := startListCentral(t)
	c.send("ok", "Pump 3 pressure low", "Tank 7 level high")
	ns := make([]ports.Notification, 0, 10_050)
	for i := range cap(ns) {
		n := storetest.NewNotification(time.Now().UTC().Add(-2 * time.Hour).Add(time.Duration(i) * time.Millisecond))
		n.Status, n.LastError, n.List, n.Subject = ports.StatusParked, "list bounces: mailbox full", "bounces", "Valve stuck open"
		ns = append(ns, n)
	}
	if _, err := c.store.Insert(t.Context(), ns); err != nil {
		t.Fatal(err)
	}

	br := newBrowser(t, exe, c.srv.URL)
	br.open("/login")
	br.logIn()
	br.open("/notifications")
	if got := br.text(`[data-count="Parked"]`); got != "10\u202f000+" {
		t.Errorf("the Parked chip of 10,050 rows reads %q, want 10 000+", got)
	}
	if got := br.text(`[data-count="Delivered"]`); got != "2" {
		t.Errorf("the Delivered chip reads %q, want 2", got)
	}
	title := run(br, "read the chip's title", chromedp.Evaluate[string](`document.querySelector('[data-count="Parked"]').title`))
	if title != "more than 10\u202f000" {
		t.Errorf("the capped chip's title is %q", title)
	}
	br.screenshot("notifications-list-capped-chips.png")
	br.checkQuiet()
}
