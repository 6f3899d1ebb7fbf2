package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// twoNodes opens two stores on one database, as two central nodes do, and
// returns them with a clock for the second one's cache that the test moves.
func twoNodes(t *testing.T, driver string) (a, b *DB, now *time.Time) {
	t.Helper()
	var dsn string
	switch driver {
	case DriverSQLite:
		dsn = filepath.Join(t.TempDir(), "outbox.db")
	default:
		dsn = newPostgresSchema(t, postgresDSN(t))
	}
	open := func() *DB {
		s, err := Open(t.Context(), Config{Driver: driver, DSN: dsn}, nil)
		if err != nil {
			t.Fatalf("open %s: %v", driver, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b = open(), open()
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	clock := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	b.dir.now = func() time.Time { return clock }
	return a, b, &clock
}

func eachDriver(t *testing.T, fn func(t *testing.T, driver string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, DriverSQLite) })
	t.Run("postgres", func(t *testing.T) { fn(t, DriverPostgres) })
}

// TestDirectoryAnswersOfOtherNodesWithinFresh: a node reuses the
// directory's answers for directoryFresh, so another node's edit reaches
// it that much later at most, and never later.
func TestDirectoryAnswersOfOtherNodesWithinFresh(t *testing.T) {
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := t.Context()
		a, b, now := twoNodes(t, driver)
		put := func(l ports.List) {
			t.Helper()
			if err := a.Directory().PutList(ctx, l); err != nil {
				t.Fatalf("PutList: %v", err)
			}
		}
		targets := func(name string) []string {
			t.Helper()
			l, err := b.Directory().List(ctx, name)
			if errors.Is(err, ports.ErrNotFound) {
				return nil
			}
			if err != nil {
				t.Fatalf("List %s: %v", name, err)
			}
			return l.Targets
		}
		put(ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}})
		if got := targets("ops"); !slices.Equal(got, []string{"a@example.com"}) {
			t.Fatalf("first read: %v", got)
		}
		if got := targets("night"); got != nil {
			t.Fatalf("unknown list: %v", got)
		}
		put(ports.List{Name: "ops", Type: "email", Targets: []string{"b@example.com"}})
		put(ports.List{Name: "night", Type: "email", Targets: []string{"n@example.com"}})
		*now = now.Add(directoryFresh - time.Millisecond)
		if got := targets("ops"); !slices.Equal(got, []string{"a@example.com"}) {
			t.Errorf("within %s of the first read: %v, want the kept answer", directoryFresh, got)
		}
		if got := targets("night"); got != nil {
			t.Errorf("within %s of the first read: %v, want the kept \"not found\"", directoryFresh, got)
		}
		*now = now.Add(time.Millisecond)
		if got := targets("ops"); !slices.Equal(got, []string{"b@example.com"}) {
			t.Errorf("%s after the first read: %v, want the other node's edit", directoryFresh, got)
		}
		if got := targets("night"); !slices.Equal(got, []string{"n@example.com"}) {
			t.Errorf("%s after the first read: %v, want the list the other node made", directoryFresh, got)
		}

		// Channel settings the same way.
		if err := a.Directory().PutChannel(ctx, ports.ChannelSettings{Type: "email", Settings: map[string]string{"from": "x@example.com"}}); err != nil {
			t.Fatal(err)
		}
		from := func() string {
			t.Helper()
			c, err := b.Directory().ChannelSettings(ctx, "email")
			if err != nil {
				t.Fatalf("ChannelSettings: %v", err)
			}
			return c.Settings["from"]
		}
		if got := from(); got != "x@example.com" {
			t.Fatalf("first read: %q", got)
		}
		if err := a.Directory().DeleteChannel(ctx, "email"); err != nil {
			t.Fatal(err)
		}
		if got := from(); got != "x@example.com" {
			t.Errorf("within %s: %q, want the kept answer", directoryFresh, got)
		}
		*now = now.Add(directoryFresh)
		if _, err := b.Directory().ChannelSettings(ctx, "email"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s after the read, deleted by the other node: %v, want ErrNotFound", directoryFresh, err)
		}
	})
}

// TestDirectoryOwnEditsAtOnce: a write through a store drops the answers it
// kept, so its own reads see the edit at once, however fresh the answer.
func TestDirectoryOwnEditsAtOnce(t *testing.T) {
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := t.Context()
		_, b, _ := twoNodes(t, driver) // b's clock never moves
		d := b.Directory()
		steps := []struct {
			name  string
			write func() error
			want  []string // nil: not found
		}{
			{"create", func() error {
				return d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}})
			}, []string{"a@example.com"}},
			{"replace", func() error {
				return d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{"b@example.com"}})
			}, []string{"b@example.com"}},
			{"delete", func() error { return d.DeleteList(ctx, "ops") }, nil},
		}
		if _, err := d.List(ctx, "ops"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("before: %v", err)
		}
		for _, s := range steps {
			if err := s.write(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			l, err := d.List(ctx, "ops")
			if s.want == nil {
				if !errors.Is(err, ports.ErrNotFound) {
					t.Errorf("after %s: %v %v, want ErrNotFound", s.name, l, err)
				}
				continue
			}
			if err != nil || !slices.Equal(l.Targets, s.want) {
				t.Errorf("after %s: %v %v, want %v", s.name, l.Targets, err, s.want)
			}
		}
		if _, err := d.ChannelSettings(ctx, "email"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("channel before: %v", err)
		}
		if err := d.PutChannel(ctx, ports.ChannelSettings{Type: "email", RateLimit: 5}); err != nil {
			t.Fatal(err)
		}
		if c, err := d.ChannelSettings(ctx, "email"); err != nil || c.RateLimit != 5 {
			t.Errorf("after PutChannel: %+v %v", c, err)
		}
		if err := d.DeleteChannel(ctx, "email"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ChannelSettings(ctx, "email"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("after DeleteChannel: %v", err)
		}
	})
}

// TestDirectoryKeptAnswersAreCopies: a caller that changes what it was
// handed changes nothing another caller reads.
func TestDirectoryKeptAnswersAreCopies(t *testing.T) {
	ctx := t.Context()
	d := newSQLiteStore(t).Directory()
	if err := d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.PutChannel(ctx, ports.ChannelSettings{Type: "email", Settings: map[string]string{"from": "x@example.com"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the first read keeps the answer, the second is handed it
		l, err := d.List(ctx, "ops")
		if err != nil || !slices.Equal(l.Targets, []string{"a@example.com"}) {
			t.Fatalf("List: %v %v", l.Targets, err)
		}
		l.Targets[0] = "changed@example.com"
		c, err := d.ChannelSettings(ctx, "email")
		if err != nil || c.Settings["from"] != "x@example.com" {
			t.Fatalf("ChannelSettings: %v %v", c.Settings, err)
		}
		c.Settings["from"] = "changed@example.com"
	}
}

// TestDirectoryErrorsAreNotKept: a lookup that failed is asked again, and
// never answered as "not found".
func TestDirectoryErrorsAreNotKept(t *testing.T) {
	ctx := t.Context()
	d := newSQLiteStore(t).Directory()
	if err := d.PutList(ctx, ports.List{Name: "ops", Type: "email"}); err != nil {
		t.Fatal(err)
	}
	d.dir.changed() // as if another node had written the list
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.List(canceled, "ops"); err == nil || errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("List with a canceled context: %v, want the context's error", err)
	}
	if _, err := d.List(ctx, "ops"); err != nil {
		t.Errorf("List after a failed lookup: %v", err)
	}
}

// TestDirectoryReadDuringWriteNotKept: an answer read while a write ran may
// be the older one, so it is handed to its caller but not kept.
func TestDirectoryReadDuringWriteNotKept(t *testing.T) {
	var c dirCache
	reads := 0
	read := func(v string) func() (string, bool, error) {
		return func() (string, bool, error) {
			reads++
			if reads == 1 {
				c.changed() // a write through this store, between the query and its answer
			}
			return v, true, nil
		}
	}
	var m map[string]kept[string]
	same := func(s string) string { return s }
	if v, _, _ := cachedRead(&c, &m, "k", same, read("old")); v != "old" {
		t.Fatalf("first read: %q", v)
	}
	if v, _, _ := cachedRead(&c, &m, "k", same, read("new")); v != "new" || reads != 2 {
		t.Errorf("second read: %q after %d reads, want \"new\" from a second read", v, reads)
	}
	if v, _, _ := cachedRead(&c, &m, "k", same, read("newer")); v != "new" || reads != 2 {
		t.Errorf("third read: %q after %d reads, want the kept \"new\"", v, reads)
	}
}

// TestDirectoryKeptIsBounded: answers for names without a list (a site
// may name any) never grow the cache past directoryKept.
func TestDirectoryKeptIsBounded(t *testing.T) {
	var c dirCache
	var m map[string]kept[ports.List]
	for i := range 3 * directoryKept {
		name := "list-" + strconv.Itoa(i)
		_, _, _ = cachedRead(&c, &m, name, copyList, func() (ports.List, bool, error) { return ports.List{}, false, nil })
		if len(m) > directoryKept {
			t.Fatalf("after %d names: %d answers kept, want at most %d", i+1, len(m), directoryKept)
		}
	}
}

// TestDirectoryCacheConcurrent reads and writes from several goroutines
// (run with -race): every read answers the list as some write left it.
func TestDirectoryCacheConcurrent(t *testing.T) {
	ctx := t.Context()
	d := newSQLiteStore(t).Directory()
	valid := map[string]bool{"a@example.com": true, "b@example.com": true}
	if err := d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.com"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if g == 0 && i%5 == 0 {
					target := []string{"a@example.com", "b@example.com"}[i/5%2]
					if err := d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{target}}); err != nil {
						t.Error(err)
						return
					}
				}
				l, err := d.List(ctx, "ops")
				if err != nil || len(l.Targets) != 1 || !valid[l.Targets[0]] {
					t.Errorf("List: %v %v", l, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The last write is what a read answers now.
	if err := d.PutList(ctx, ports.List{Name: "ops", Type: "email", Targets: []string{"b@example.com"}}); err != nil {
		t.Fatal(err)
	}
	if l, err := d.List(ctx, "ops"); err != nil || l.Targets[0] != "b@example.com" {
		t.Errorf("after the last write: %v %v", l, err)
	}
}
