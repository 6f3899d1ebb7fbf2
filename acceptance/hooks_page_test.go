package acceptance

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/ports/waittest"
)

// TestDevWebhookCaptureInChromium runs `outbox dev` with an overlay whose
// list, of the built-in webhook channel, targets dev's webhook capture;
// sends two notifications to it with `outbox notify send`; and reads the
// page's Webhook capture view in headless Chromium: both requests, newest
// first, the target's token hidden, a subject holding markup shown as
// text, nothing run by the page but its own script.
func TestDevWebhookCaptureInChromium(t *testing.T) {
	exe := browserPath(t)
	dir := t.TempDir()
	overlay := filepath.Join(dir, "overlay.yaml")
	if err := os.WriteFile(overlay, []byte("lists:\n  - name: control-room\n    type: webhook\n    targets: ['{{hooks}}/control-room?token=s3cr3t-in-url']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testBinary(t), "dev", "-free-ports", "-http", "127.0.0.1:0", "-log-format", "json", "-config", overlay)
	cmd.Dir = dir
	cmd.Env = append(childEnv(), "OUTBOX_DEV_ADMIN_PASSWORD="+pagePassword)
	var out guardtest.LogBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("outbox dev after SIGINT: %v\n%s", waitErr, out.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("outbox dev did not stop within a minute of SIGINT:\n%s", out.String())
		}
	}
	t.Cleanup(stop)
	waittest.For(t, nodeStartTimeout, "outbox dev to print its addresses", func() (bool, string) {
		if isClosed(exited) {
			t.Fatalf("outbox dev ended while starting (%v):\n%s", waitErr, out.String())
		}
		return strings.Contains(out.String(), "Ctrl-C stops everything"), ""
	})
	field := func(label string) string {
		_, v, _ := strings.Cut(out.String(), label)
		v, _, _ = strings.Cut(v, "\n")
		v, _, _ = strings.Cut(strings.TrimSpace(v), " ")
		return v
	}
	page, sites := strings.TrimSuffix(field("Operator page:"), "/"), field("Site API:")

	for _, subject := range []string{"Pump 3 stopped", `<img src=x onerror=alert(1)> valve`} {
		if code, stdout, stderr := runOutbox(t, "notify", "send", "-site", sites, "-list", "control-room", "-subject", subject, "-body", "Pressure low."); code != 0 {
			t.Fatalf("notify send: exit %d\n%s%s", code, stdout, stderr)
		}
	}

	br := newBrowser(t, exe, page)
	br.open("/login")
	br.do("fill in the login form",
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="name"]`), "admin"),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name="password"]`), pagePassword))
	br.submit("log in", `form.login button[type="submit"]`)
	br.waitFor("both requests on /hooks", "/hooks", func() (bool, string) {
		n := run(br, "count the requests", chromedp.Evaluate[int](`document.querySelectorAll("table.hooks tbody tr pre.body").length`))
		return n == 2, ""
	})
	if nav := br.text(`nav a[aria-current="page"]`); nav != "Webhook capture" {
		t.Errorf("the nav marks %q, want Webhook capture", nav)
	}
	requests := run(br, "read the requests", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("table.hooks tbody tr td:nth-child(2)"), (td) => td.textContent.trim())`))
	for _, r := range requests {
		if r != "POST /control-room?token=(hidden)" {
			t.Errorf("a request reads %q, want POST /control-room with the token hidden", r)
		}
	}
	bodies := run(br, "read the bodies", chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("table.hooks tbody pre.body"), (pre) => pre.textContent)`))
	if len(bodies) != 2 || !strings.Contains(bodies[0], `\u003cimg src=x onerror=alert(1)\u003e valve`) || !strings.Contains(bodies[1], "Pump 3 stopped") {
		t.Errorf("the bodies read %q, want the markup one first, as text", bodies)
	}
	if strings.Contains(run(br, "read the page", chromedp.Evaluate[string](`document.documentElement.outerHTML`)), "s3cr3t-in-url") {
		t.Error("the page shows the target's token")
	}

	// The rows refresh in place, keeping what the reader opened or closed:
	// the older row's headers opened, the newer row's body closed.
	run(br, "open and close details", chromedp.Evaluate[bool](`(() => {
		window.outboxNotReloaded = true;
		const rows = document.querySelectorAll("table.hooks tbody tr");
		rows[1].querySelector("td:nth-child(3) details").open = true;
		rows[0].querySelector("td:nth-child(4) details").open = false;
		return true;
	})()`))
	if code, stdout, stderr := runOutbox(t, "notify", "send", "-site", sites, "-list", "control-room", "-subject", "Pump 4 started", "-body", "Pressure back."); code != 0 {
		t.Fatalf("notify send: exit %d\n%s%s", code, stdout, stderr)
	}
	waittest.For(t, 30*time.Second, "the third request on /hooks without a reload", func() (bool, string) {
		n := run(br, "count the rows", chromedp.Evaluate[int](`document.querySelectorAll("table.hooks tbody tr[data-hook]").length`))
		return n == 3, ""
	})
	state := run(br, "read what is open", chromedp.Evaluate[[]bool](`(() => {
		const rows = document.querySelectorAll("table.hooks tbody tr");
		return [window.outboxNotReloaded === true,
			rows[0].querySelector("td:nth-child(4) details").open,
			rows[1].querySelector("td:nth-child(4) details").open,
			rows[2].querySelector("td:nth-child(3) details").open];
	})()`))
	if want := []bool{true, true, false, true}; !slices.Equal(state, want) {
		t.Errorf("after the refresh [not reloaded, new body open, closed body closed, opened headers open] = %v, want %v", state, want)
	}
	if head := br.text("h1 .sub"); !strings.HasPrefix(head, "3 received, newest first") {
		t.Errorf("the heading reads %q after the refresh", head)
	}
	br.screenshot("dev-webhook-capture.png")
	br.checkQuiet()
	stop()
}
