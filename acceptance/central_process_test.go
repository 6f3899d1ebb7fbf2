package acceptance

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/ports/waittest"
)

// centralProcess is a real `outbox central` process of a test or a
// benchmark, its output in a log file.
type centralProcess struct {
	t       testing.TB
	log     string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// startCentralProcess starts bin as `central -config file` in dir with env,
// its output in dir/central.log, and returns once readyURL answers 200 OK.
// The process dies with this one (Pdeathsig) and is stopped at the end of
// tb (stop).
func startCentralProcess(tb testing.TB, bin, dir, file string, env []string, readyURL string) *centralProcess {
	tb.Helper()
	c := &centralProcess{t: tb, log: filepath.Join(dir, "central.log"), exited: make(chan struct{})}
	logFile, err := os.Create(c.log)
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	c.cmd = exec.Command(bin, "central", "-config", file)
	c.cmd.Dir = dir
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// Should this process die without its cleanups, central dies with it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		tb.Fatalf("start central: %v", err)
	}
	// Ends when the process does; the cleanup makes sure it does.
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	tb.Cleanup(c.stop)
	waittest.For(tb, nodeStartTimeout, "central answers "+readyURL, func() (bool, string) {
		if isClosed(c.exited) {
			tb.Fatalf("central ended while starting (%v):\n%s", c.waitErr, c.tail(60))
		}
		resp, err := http.Get(readyURL)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return c
}

// stop stops central with SIGTERM; it fails the test unless central stops
// in time with exit status 0 and without a data race in its log.
func (c *centralProcess) stop() {
	if !isClosed(c.exited) {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
			if c.waitErr != nil {
				c.t.Errorf("central stopped with %v after SIGTERM", c.waitErr)
			}
		case <-time.After(nodeStopTimeout):
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.t.Errorf("central did not stop within %s of SIGTERM", nodeStopTimeout)
		}
	}
	b, _ := os.ReadFile(c.log)
	switch {
	case bytes.Contains(b, []byte("WARNING: DATA RACE")):
		c.t.Errorf("central's log reports a data race:\n%s", c.tail(200))
	case c.t.Failed():
		c.t.Log(c.tail(60))
	}
}

// tail returns the last k lines of central's log.
func (c *centralProcess) tail(k int) string {
	raw, err := os.ReadFile(c.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(string(bytes.TrimRight(raw, "\n")), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return fmt.Sprintf("--- last %d lines of central's log (%s) ---\n%s", len(lines), c.log, strings.Join(lines, "\n"))
}
