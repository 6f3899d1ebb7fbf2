package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/siteline/outbox/ports"
)

// dbTime scans an instant from any dialect's representation: a time.Time
// (PostgreSQL, MS SQL), integer Unix microseconds (SQLite), or NULL (the zero
// time). The result is in UTC.
type dbTime struct{ t time.Time }

// Scan implements sql.Scanner.
func (d *dbTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		d.t = time.Time{}
	case int64:
		d.t = time.UnixMicro(v).UTC()
	case time.Time:
		d.t = v.UTC()
	case []byte:
		return d.parse(string(v))
	case string:
		return d.parse(v)
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as an instant", src)
	}
	return nil
}

func (d *dbTime) parse(s string) error {
	if us, err := strconv.ParseInt(s, 10, 64); err == nil {
		d.t = time.UnixMicro(us).UTC()
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			d.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("sqlstore: cannot parse %q as an instant", s)
}

// notificationScanner scans rows of notificationColumns. It reuses its
// destinations from row to row.
type notificationScanner struct {
	n                                   ports.Notification
	typeData, targets                   []byte
	claimedBy                           sql.NullString
	priority, retryCount                int64
	status                              string
	enq, created, updated, lastAt, next dbTime
	delivered, expires, claimedUntil    dbTime
	dest                                []any
}

func (sc *notificationScanner) scan(rows *sql.Rows) (ports.Notification, error) {
	if sc.dest == nil {
		n := &sc.n
		sc.dest = []any{
			&n.ID, &n.Type, &n.List, &n.Subject, &n.Body, &sc.typeData, &sc.priority,
			&sc.status, &sc.retryCount, &n.LastError, &sc.targets,
			&n.SourceSite, &n.SourceInstance, &n.SourceScript, &n.ExecutionID, &n.ParentExecutionID,
			&sc.enq, &sc.created, &sc.updated, &sc.lastAt, &sc.next,
			&sc.delivered, &sc.expires, &sc.claimedBy, &sc.claimedUntil,
		}
	}
	sc.typeData, sc.targets = nil, nil
	if err := rows.Scan(sc.dest...); err != nil {
		return ports.Notification{}, err
	}
	n := sc.n
	if len(sc.typeData) > 0 {
		n.TypeData = json.RawMessage(sc.typeData) // database/sql copied it
	} else {
		n.TypeData = nil
	}
	n.ResolvedTargets = nil
	if sc.targets != nil {
		if err := json.Unmarshal(sc.targets, &n.ResolvedTargets); err != nil {
			return ports.Notification{}, fmt.Errorf("decode resolved_targets of %s: %w", n.ID, err)
		}
	}
	n.Priority = int(sc.priority)
	n.RetryCount = int(sc.retryCount)
	n.Status = ports.Status(sc.status)
	n.ClaimedBy = sc.claimedBy.String
	n.SiteEnqueuedAt = sc.enq.t
	n.CreatedAt = sc.created.t
	n.UpdatedAt = sc.updated.t
	n.LastAttemptAt = sc.lastAt.t
	n.NextAttemptAt = sc.next.t
	n.DeliveredAt = sc.delivered.t
	n.ExpiresAt = sc.expires.t
	n.ClaimedUntil = sc.claimedUntil.t
	return n, nil
}
