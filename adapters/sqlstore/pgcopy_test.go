package sqlstore

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// copyRows returns rows with every kind of value the COPY encodes: NULL
// and set nullable texts and instants, a negative priority, an upper-case
// id, non-ASCII text, an empty text.
func copyRows(t *testing.T, now time.Time) []ports.Notification {
	t.Helper()
	a := storetest.NewNotification(now)
	a.ID = strings.ToUpper(a.ID)
	a.Subject = "Tank 3 level high — réservoir ½"
	a.Body = ""
	a.TypeData = []byte(`{"k":"v"}`)
	a.Priority = -7
	a.ExpiresAt = now.Add(48*time.Hour + 123*time.Microsecond)
	b := storetest.NewNotification(now.Add(time.Microsecond))
	b.Priority = 1<<31 - 1
	b.Status = ports.StatusParked
	b.LastError = "parked at ingest"
	b.SiteEnqueuedAt = time.Time{}
	c := storetest.NewNotification(now.Add(2 * time.Microsecond))
	c.CreatedAt = time.Date(1601, 1, 1, 0, 0, 0, 1000, time.UTC) // before 2000, beyond a Duration from it
	c.Status = ports.StatusRetrying
	c.RetryCount = 2
	c.ResolvedTargets = []string{"ops@example.com"}
	c.Targets = []ports.TargetState{
		{Target: "ops@example.com", Status: ports.TargetDelivered, Attempts: 1, LastAttemptAt: now, DeliveredAt: now},
		{Target: "env:ONCALL", Status: ports.TargetRetrying, Attempts: 2, LastError: "421 busy", LastAttemptAt: now},
	}
	c.ClaimedBy = "dispatcher-1"
	c.ClaimedUntil = now.Add(time.Minute)
	return []ports.Notification{a, b, c}
}

// TestPostgresCopyInsert: a fresh batch is stored by one COPY, and each
// row reads back exactly as the same row stored by the insert statement.
func TestPostgresCopyInsert(t *testing.T) {
	t.Parallel()
	s := newPostgresStore(t, postgresDSN(t)).Notifications()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	ns := copyRows(t, now)
	rows := make([]notificationRow, len(ns))
	twins := make([]notificationRow, len(ns)) // the same rows under other ids
	for i := range ns {
		var err error
		if rows[i], err = toRow(&ns[i]); err != nil {
			t.Fatal(err)
		}
		twin := ns[i]
		twin.ID = storetest.NewID()
		if twins[i], err = toRow(&twin); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.copyInsert(ctx, rows)
	if err != nil {
		t.Fatalf("copyInsert: %v", err)
	}
	for i, id := range ids {
		if want := strings.ToLower(ns[i].ID); id != want {
			t.Fatalf("copyInsert returned id %q, want %q", id, want)
		}
	}
	stmt := query{text: pgInsertText, args: s.pgArgs(pgArrays(notificationModel, twins))}
	if got, err := s.writeIDs(ctx, []query{stmt}, len(twins)); err != nil || len(got) != len(twins) {
		t.Fatalf("insert statement: %d ids, %v", len(got), err)
	}
	for i := range ns {
		copied, err := s.Get(ctx, ns[i].ID)
		if err != nil {
			t.Fatalf("get copied row %d: %v", i, err)
		}
		stated, err := s.Get(ctx, twins[i].ID)
		if err != nil {
			t.Fatalf("get stated row %d: %v", i, err)
		}
		stated.ID = copied.ID
		if !equalNotifications(copied, stated) {
			t.Errorf("row %d: COPY stored\n%+v\nthe statement stored\n%+v", i, copied, stated)
		}
		if !copied.CreatedAt.Equal(ns[i].CreatedAt) || !copied.ExpiresAt.Equal(ns[i].ExpiresAt) {
			t.Errorf("row %d: times %v, %v; want %v, %v", i, copied.CreatedAt, copied.ExpiresAt, ns[i].CreatedAt, ns[i].ExpiresAt)
		}
	}
}

// equalNotifications compares two notifications field by field, times
// (also those of the targets) by instant.
func equalNotifications(a, b ports.Notification) bool {
	norm := func(n ports.Notification) ports.Notification {
		for _, t := range []*time.Time{&n.SiteEnqueuedAt, &n.CreatedAt, &n.UpdatedAt, &n.LastAttemptAt,
			&n.NextAttemptAt, &n.DeliveredAt, &n.ExpiresAt, &n.ClaimedUntil} {
			*t = t.UTC()
		}
		n.Targets = slices.Clone(n.Targets)
		for i := range n.Targets {
			n.Targets[i].LastAttemptAt = n.Targets[i].LastAttemptAt.UTC()
			n.Targets[i].DeliveredAt = n.Targets[i].DeliveredAt.UTC()
		}
		return n
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestPostgresCopyFallsBack: a batch holding an id stored already makes the
// COPY store nothing, and Insert stores the new rows with the statement; a
// value out of a column's range leaves it to the statement, which refuses
// it; a column whose type changed under the open store is read again.
func TestPostgresCopyFallsBack(t *testing.T) {
	t.Parallel()
	db := newPostgresStore(t, postgresDSN(t))
	s := db.Notifications()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := storetest.NewNotification(now)
	if _, err := s.Insert(ctx, []ports.Notification{old}); err != nil {
		t.Fatal(err)
	}
	fresh := storetest.NewNotification(now.Add(time.Microsecond))
	rows := make([]notificationRow, 2)
	for i, n := range []ports.Notification{fresh, old} {
		var err error
		if rows[i], err = toRow(&n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.copyInsert(ctx, rows); !errors.Is(err, errNoCopy) {
		t.Fatalf("copyInsert of a stored id: %v, want errNoCopy", err)
	}
	if _, err := s.Get(ctx, fresh.ID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the failed COPY stored a row: %v", err)
	}
	ids, err := s.Insert(ctx, []ports.Notification{fresh, old})
	if err != nil || len(ids) != 1 || ids[0] != fresh.ID {
		t.Fatalf("Insert of a resend: %v, %v; want [%s]", ids, err, fresh.ID)
	}

	big := storetest.NewNotification(now.Add(2 * time.Microsecond))
	big.Priority = 1 << 31
	row, err := toRow(&big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.copyInsert(ctx, []notificationRow{row}); !errors.Is(err, errNoCopy) {
		t.Fatalf("copyInsert of a priority beyond integer: %v, want errNoCopy", err)
	}
	if _, err := s.Insert(ctx, []ports.Notification{big}); err == nil || errors.Is(err, errNoCopy) {
		t.Fatalf("Insert of a priority beyond integer: %v, want the statement's error", err)
	}

	// The column types were read; a migration widens one.
	if _, err := db.writer().ExecContext(ctx, `ALTER TABLE notifications ALTER COLUMN priority TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	small := storetest.NewNotification(now.Add(3 * time.Microsecond))
	small.Priority = 5
	ids, err = s.Insert(ctx, []ports.Notification{small})
	if err != nil || len(ids) != 1 {
		t.Fatalf("Insert after the column changed: %v, %v", ids, err)
	}
	if got, err := s.Get(ctx, small.ID); err != nil || got.Priority != 5 {
		t.Fatalf("stored priority %d, %v; want 5", got.Priority, err)
	}
	if row, err = toRow(&big); err != nil {
		t.Fatal(err)
	}
	if _, err := s.copyInsert(ctx, []notificationRow{row}); err != nil {
		t.Fatalf("copyInsert after the types were read again: %v", err)
	}
	if got, err := s.Get(ctx, big.ID); err != nil || got.Priority != 1<<31 {
		t.Fatalf("stored priority %d, %v; want %d", got.Priority, err, int64(1<<31))
	}
}

// The bytes of a UUID are those google/uuid reads, in either letter case;
// anything isUUID refuses has none.
func TestUUIDBytes(t *testing.T) {
	for range 100 {
		id := uuid.New()
		for _, s := range []string{id.String(), strings.ToUpper(id.String())} {
			got, ok := uuidBytes(s)
			if !ok || got != [16]byte(id) {
				t.Fatalf("uuidBytes(%q) = %x, %v; want %x", s, got, ok, id)
			}
		}
	}
	for _, s := range []string{"", "not-a-uuid", "0190f3c28e1a7cc19a113f5a8e2b7c01", "{0190f3c2-8e1a-7cc1-9a11-3f5a8e2b7c01}",
		"0190f3c2-8e1a-7cc1-9a11-3f5a8e2b7c0g", "0190f3c2+8e1a-7cc1-9a11-3f5a8e2b7c01"} {
		if _, ok := uuidBytes(s); ok {
			t.Errorf("uuidBytes(%q) accepted", s)
		}
	}
}

// A uuid column's array goes to pgx as bytes, which it sends in binary,
// when the statement is prepared; unprepared, or with one id that is no
// UUID, it stays text (for PostgreSQL to refuse the id).
func TestUUIDColumnsAreBinaryArrays(t *testing.T) {
	rows := []recordRow{{ID: uuid.NewString()}, {ID: strings.ToUpper(uuid.NewString())}}
	prepared, unprepared := &handle{pgPrepare: true}, &handle{}
	if got := prepared.pgArgs(pgArrays(recordModel, rows)); !reflect.DeepEqual(got[1], [][16]byte{uuid.MustParse(rows[0].ID), uuid.MustParse(rows[1].ID)}) {
		t.Errorf("prepared, the id array is %#v, want the ids' bytes", got[1])
	}
	if got := unprepared.pgArgs(pgArrays(recordModel, rows)); !reflect.DeepEqual(got[0], []string{rows[0].ID, rows[1].ID}) {
		t.Errorf("unprepared, the id array is %#v, want the texts", got[0])
	}
	rows = append(rows, recordRow{ID: "not-a-uuid"})
	if got := prepared.pgArgs(pgArrays(recordModel, rows)); !reflect.DeepEqual(got[1], []string{rows[0].ID, rows[1].ID, "not-a-uuid"}) {
		t.Errorf("with an id that is no UUID, the id array is %#v, want the texts", got[1])
	}
}
