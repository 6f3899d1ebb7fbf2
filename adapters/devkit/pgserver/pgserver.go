// Package pgserver runs a PostgreSQL server of one test's own, which the
// test may stop, start and crash: initdb in a temporary directory, trust
// authentication, loopback only, fsync off. The failure tests of the store
// (a database restart under load) and of cached writes (a plant database
// stopped mid-burst) use it; a shared server must never be stopped.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BinDirEnv names the directory of PostgreSQL's initdb and pg_ctl. Unset,
// they are looked for on PATH and in /usr/lib/postgresql/*/bin, newest
// first.
const BinDirEnv = "OUTBOX_TEST_PG_BINDIR"

// Server is a running PostgreSQL server of one test. As root it runs as the
// user postgres, since PostgreSQL refuses to run as root.
type Server struct {
	// DSN reaches the server as the user postgres, database postgres.
	DSN string

	bin  string   // the directory of initdb and pg_ctl
	dir  string   // the data directory's parent, also the socket directory
	as   []string // the command prefix that runs as its user
	opts string   // the server's options
}

// BinDir finds a directory holding initdb and pg_ctl, "" when there is
// none.
func BinDir() string {
	has := func(d string) bool {
		for _, f := range []string{"initdb", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(d, f)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	return ""
}

// Run initdbs and starts a server for the test, stopped at its end. It
// skips the test, saying what is missing, when the server's programs or (as
// root) the user postgres are absent.
func Run(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		t.Skipf("no PostgreSQL server programs (initdb, pg_ctl) on PATH, in /usr/lib/postgresql/*/bin or in %s: install postgresql (.ci/test.sh does)", BinDirEnv)
	}
	// In /tmp whatever TMPDIR says: the socket path must stay short, and
	// the user postgres must reach it.
	dir, err := os.MkdirTemp("/tmp", "outbox-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no user postgres to run PostgreSQL as (.ci/test.sh creates it): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		s.as = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %s -k %s -c fsync=off -c max_connections=200", port, dir)
		if lastErr = s.Start(); lastErr == nil {
			s.DSN = "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"
			t.Cleanup(func() {
				if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop"); err != nil && s.Running() {
					t.Logf("stop PostgreSQL: %v\n%s", err, out)
				}
			})
			return s
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
	t.Fatalf("start PostgreSQL: %v\n%s", lastErr, log)
	return nil
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	_, port, _ := strings.Cut(l.Addr().String(), ":")
	return port, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// Start starts the stopped server and waits until it accepts connections.
func (s *Server) Start() error {
	out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60", "-o", s.opts, "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s", err, out)
	}
	return nil
}

// StopImmediate stops the server as a crash would (pg_ctl stop -m
// immediate: sessions cut, no checkpoint, crash recovery at the next
// start).
func (s *Server) StopImmediate() error {
	out, err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// RestartImmediate restarts the server as a crash would (pg_ctl restart -m
// immediate) and waits until it accepts connections again.
func (s *Server) RestartImmediate() error {
	out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"),
		"-m", "immediate", "-w", "-t", "60", "-o", s.opts, "restart")
	if err != nil {
		return fmt.Errorf("pg_ctl restart: %w\n%s", err, out)
	}
	return nil
}

// Running reports whether the server runs.
func (s *Server) Running() bool {
	_, err := s.run("pg_ctl", "-D", s.data(), "status")
	return err == nil
}

// run runs one of the server's programs as its user, 2 minutes at most
// (also at cleanup, after the test's context ended).
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(slices.Clone(s.as), filepath.Join(s.bin, prog))
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
	cmd.Dir = s.dir
	out, err := cmd.CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out, fmt.Errorf("%s timed out: %w", prog, ctx.Err())
	}
	return out, err
}
