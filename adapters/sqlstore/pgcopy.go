package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL's Insert first tries one binary COPY of the whole batch into
// the notifications table, the cheapest way into it: no statement to plan,
// no unnest, no speculative insertion per row for ON CONFLICT (DESIGN.md,
// "Insert on PostgreSQL"). A COPY is one statement, so it stores all the
// rows or none. When an id is stored already (a resend: the COPY fails on
// the primary key), or when the COPY cannot carry the batch (a column type
// it does not encode, a value out of the column's range), Insert runs the
// insert-if-not-exists statement instead, which stores the new rows and
// returns their ids.

// pgCopier holds the types of the notifications table's columns, read once
// per store, which the binary COPY must match exactly.
type pgCopier struct {
	mu    sync.Mutex
	oids  []uint32 // per column of notificationModel; nil until read
	unfit bool     // a column of a type the encoder does not write: never COPY
}

// The type OIDs the encoder writes (pg_type.oid, fixed by PostgreSQL).
const (
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidVarchar     = 1043
	oidTimestamptz = 1184
	oidUUID        = 2950
)

// errNoCopy says the batch goes through the insert statement instead.
var errNoCopy = errors.New("sqlstore: batch not fit for COPY")

// types returns the OIDs of the notifications columns in model order, or
// errNoCopy when one is of a type the encoder does not write.
func (p *pgCopier) types(ctx context.Context, db *sql.DB) ([]uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unfit {
		return nil, errNoCopy
	}
	if p.oids != nil {
		return p.oids, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT attname, atttypid FROM pg_attribute `+
		`WHERE attrelid = 'notifications'::regclass AND attnum > 0 AND NOT attisdropped`)
	if err != nil {
		return nil, fmt.Errorf("read column types: %w", err)
	}
	defer rows.Close()
	byName := map[string]uint32{}
	for rows.Next() {
		var name string
		var oid uint32
		if err := rows.Scan(&name, &oid); err != nil {
			return nil, fmt.Errorf("read column types: %w", err)
		}
		byName[name] = oid
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read column types: %w", err)
	}
	oids := make([]uint32, len(notificationModel))
	for i, c := range notificationModel {
		oid, ok := byName[c.name]
		if !ok || !encodes(c.kind, oid) {
			p.unfit = true
			return nil, errNoCopy
		}
		oids[i] = oid
	}
	p.oids = oids
	return oids, nil
}

// forget drops the column types read, to read them again at the next COPY
// (after a migration changed the table under an open store).
func (p *pgCopier) forget() {
	p.mu.Lock()
	p.oids, p.unfit = nil, false
	p.mu.Unlock()
}

// encodes reports whether the encoder writes a column of kind as type oid.
func encodes(kind columnKind, oid uint32) bool {
	switch kind {
	case textColumn:
		return oid == oidText || oid == oidVarchar || oid == oidUUID
	case nullTextColumn:
		return oid == oidText || oid == oidVarchar
	case intColumn:
		return oid == oidInt2 || oid == oidInt4 || oid == oidInt8
	case instantColumn:
		return oid == oidTimestamptz
	}
	return false
}

// pgEpoch is the zero of PostgreSQL's binary timestamps.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// encodeCopy writes rows in the binary COPY format, one field per column of
// notificationModel as oids says; errNoCopy for a value the column cannot
// take (which the insert statement then reports).
func encodeCopy(buf []byte, oids []uint32, rows []notificationRow) ([]byte, error) {
	buf = append(buf, "PGCOPY\n\xff\r\n\x00"...)
	buf = binary.BigEndian.AppendUint32(buf, 0) // flags
	buf = binary.BigEndian.AppendUint32(buf, 0) // header extension
	for i := range rows {
		row := reflect.ValueOf(&rows[i]).Elem()
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(notificationModel)))
		for j, c := range notificationModel {
			f := row.Field(c.field)
			switch c.kind {
			case textColumn:
				if oids[j] == oidUUID {
					var u [16]byte
					if !isUUID(f.String()) {
						return nil, errNoCopy
					}
					if _, err := hex.Decode(u[:], []byte(strings.ReplaceAll(f.String(), "-", ""))); err != nil {
						return nil, errNoCopy
					}
					buf = binary.BigEndian.AppendUint32(buf, 16)
					buf = append(buf, u[:]...)
					continue
				}
				buf = appendCopyText(buf, f.String())
			case nullTextColumn:
				if s := f.String(); s != "" {
					buf = appendCopyText(buf, s)
				} else {
					buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32) // -1: NULL
				}
			case intColumn:
				v := f.Int()
				switch oids[j] {
				case oidInt2:
					if v < math.MinInt16 || v > math.MaxInt16 {
						return nil, errNoCopy
					}
					buf = binary.BigEndian.AppendUint32(buf, 2)
					buf = binary.BigEndian.AppendUint16(buf, uint16(v))
				case oidInt4:
					if v < math.MinInt32 || v > math.MaxInt32 {
						return nil, errNoCopy
					}
					buf = binary.BigEndian.AppendUint32(buf, 4)
					buf = binary.BigEndian.AppendUint32(buf, uint32(v))
				default:
					buf = binary.BigEndian.AppendUint32(buf, 8)
					buf = binary.BigEndian.AppendUint64(buf, uint64(v))
				}
			case instantColumn:
				t := f.Addr().Interface().(*instant).t
				if t.IsZero() {
					buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32)
					continue
				}
				us := t.UnixMicro() - pgEpoch.UnixMicro()
				buf = binary.BigEndian.AppendUint32(buf, 8)
				buf = binary.BigEndian.AppendUint64(buf, uint64(us))
			}
		}
	}
	return binary.BigEndian.AppendUint16(buf, math.MaxUint16), nil // -1: the end
}

func appendCopyText(buf []byte, s string) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
	return append(buf, s...)
}

// pgCopyText is the COPY statement of the notifications columns.
var pgCopyText = `COPY "notifications" (` + quoted("", notificationColumns) + `) FROM STDIN (FORMAT binary)`

// copyInsert stores rows with one binary COPY and returns their ids (in
// PostgreSQL's text form of a uuid, as RETURNING gives them). errNoCopy
// says nothing was stored and the insert statement must run: an id is
// stored already, or the batch or the table does not fit the encoder.
func (h *handle) copyInsert(ctx context.Context, rows []notificationRow) ([]string, error) {
	oids, err := h.pgCopy.types(ctx, h.writer())
	if err != nil {
		return nil, err
	}
	data, err := encodeCopy(nil, oids, rows)
	if err != nil {
		return nil, err
	}
	c, err := h.writer().Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNoCopy
		}
		_, err := sc.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(data), pgCopyText)
		return err
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) {
		switch {
		case pe.Code == "23505": // unique_violation: an id is stored already
			return nil, errNoCopy
		case strings.HasPrefix(pe.Code, "42"), pe.Code == "22P03", pe.Code == "08P01":
			// The table changed under the store: a column of another
			// type (a field of the wrong size), or gone.
			h.pgCopy.forget()
			return nil, errNoCopy
		case strings.HasPrefix(pe.Code, "22"): // a value the column refuses: the statement says which
			return nil, errNoCopy
		}
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = strings.ToLower(rows[i].ID)
	}
	return ids, nil
}
