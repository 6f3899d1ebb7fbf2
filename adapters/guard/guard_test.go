package guard

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// manualClock is a clock the tests move.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

func TestRefusalsLogOncePerCallerPerInterval(t *testing.T) {
	var out syncBuffer
	clock := &manualClock{t: time.Unix(1e9, 0)}
	r := NewRefusals("site_link", slog.New(slog.NewTextHandler(&out, nil)), time.Minute)
	r.now = clock.Now

	for range 1000 {
		r.Refuse("10.0.0.1", "unauthenticated")
	}
	r.Refuse("10.0.0.2", "unauthenticated")
	if got := r.Count("unauthenticated"); got != 1001 {
		t.Fatalf("Count = %d, want 1001 (every refusal counted)", got)
	}
	if lines := out.Lines(); len(lines) != 2 {
		t.Fatalf("%d lines for 1,001 refusals from two callers, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	clock.Add(time.Minute)
	r.Refuse("10.0.0.1", "unauthenticated")
	lines := out.Lines()
	if len(lines) != 3 || !strings.Contains(lines[2], "suppressed=999") || !strings.Contains(lines[2], "caller=10.0.0.1") {
		t.Fatalf("after the interval, want a third line with suppressed=999; got:\n%s", strings.Join(lines, "\n"))
	}
}

func TestRefusalsBoundTheirMemory(t *testing.T) {
	var out syncBuffer
	r := NewRefusals("http", slog.New(slog.NewTextHandler(&out, nil)), time.Hour)
	for i := range 3 * maxLogKeys {
		r.Refuse(fmt.Sprintf("caller-%d", i), "too many connections")
	}
	r.mu.Lock()
	n := len(r.callers)
	r.mu.Unlock()
	if n > maxLogKeys+1 {
		t.Fatalf("%d callers remembered, want at most %d", n, maxLogKeys+1)
	}
	if lines := out.Lines(); len(lines) > maxLogKeys+1 {
		t.Fatalf("%d lines for %d distinct callers within one interval, want at most %d", len(lines), 3*maxLogKeys, maxLogKeys+1)
	}
}

func TestKeyedLimiterIsPerKey(t *testing.T) {
	clock := &manualClock{t: time.Unix(1e9, 0)}
	k := NewKeyedLimiter(10, 5)
	k.now = clock.Now
	for i := range 5 {
		if !k.Allow("a") {
			t.Fatalf("call %d of a within the burst refused", i+1)
		}
	}
	if k.Allow("a") {
		t.Fatal("a past its burst allowed")
	}
	if d := k.RetryAfter("a", 1); d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want (0, 100ms]", d)
	}
	if !k.Allow("b") {
		t.Fatal("b refused because a spent its tokens")
	}
	clock.Add(100 * time.Millisecond)
	if !k.Allow("a") {
		t.Fatal("a refused after a token came back")
	}
	if k.AllowN("c", 6) {
		t.Fatal("AllowN past the burst allowed")
	}
}

func TestKeyedLimiterBoundsItsMemory(t *testing.T) {
	clock := &manualClock{t: time.Unix(1e9, 0)}
	k := NewKeyedLimiter(1, 1)
	k.now = clock.Now
	for i := range maxLimiterKeys + 100 {
		k.Allow(fmt.Sprintf("k%d", i))
	}
	k.mu.Lock()
	n := len(k.buckets)
	k.mu.Unlock()
	if n > maxLimiterKeys {
		t.Fatalf("%d buckets, want at most %d", n, maxLimiterKeys)
	}
	// The keys past the bound share the overflow bucket: one token between them.
	if k.Allow("another") {
		t.Fatal("a new key past the bound had a token of its own")
	}
	// Once the old buckets are full again they are forgotten, and new keys get their own.
	clock.Add(2 * time.Second)
	if !k.Allow("late") {
		t.Fatal("a new key refused after every bucket refilled")
	}
}

func TestNoLimit(t *testing.T) {
	k := NewKeyedLimiter(0, 0)
	for range 1000 {
		if !k.AllowN("a", 1<<20) {
			t.Fatal("an unlimited limiter refused")
		}
	}
}

func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRefusals("test", nil, time.Minute)
	l := LimitListener(inner, ConnLimits{PerAddress: 2}, r)
	defer l.Close()

	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// refused dials and waits until the server has closed the connection;
	// the refusal is counted before the close.
	refused := func() {
		t.Helper()
		c := dial()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection past the bound was kept open (%v)", err)
		}
	}
	dial()
	dial()
	s1 := <-accepted
	<-accepted

	refused() // the third from the same address
	if got := r.Count("too many connections"); got != 1 {
		t.Fatalf("refusals counted = %d, want 1", got)
	}

	// Closing one frees its slot, once.
	s1.Close()
	s1.Close()
	dial()
	<-accepted
	refused()
	if got := r.Count("too many connections"); got != 2 {
		t.Fatalf("refusals counted = %d, want 2", got)
	}
}

func TestOnLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7201": true, "127.8.9.10:1": true, "[::1]:7201": true, "localhost:80": true, "LocalHost:80": true,
		"0.0.0.0:7201": false, "[::]:7201": false, ":7201": false, "10.0.0.1:7201": false, "plant-a:7201": false,
		"127.0.0.1": false, "[::ffff:127.0.0.1]:1": true, "": false,
	} {
		if got := OnLoopback(addr); got != want {
			t.Errorf("OnLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
