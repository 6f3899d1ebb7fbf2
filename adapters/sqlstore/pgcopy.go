package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
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
// rows or none. When the COPY cannot store the batch (an id is stored
// already, a column type or value it does not encode, or any other refusal
// by the server), Insert runs the insert-if-not-exists statement instead,
// which stores the new rows and returns their ids, or reports the error
// in its own words.

// copyRecheck is how long COPY stays off after the table turned out not to
// fit the encoder or the server refused COPY as such (feature not
// supported: row-level security, a proxy without COPY); then the next
// Insert reads the column types again and tries COPY again.
const copyRecheck = time.Minute

// pgCopier holds the types of the notifications table's columns, read once
// per store, which the binary COPY must match exactly, and whether COPY is
// off for a while. Its mutex guards the fields only; no query runs under it.
type pgCopier struct {
	mu       sync.Mutex
	oids     []uint32  // per column of notificationModel; nil until read
	gen      uint64    // counts forget calls: a read begun before one is not kept
	offUntil time.Time // no COPY before then (zero: COPY on)
	offLog   bool      // that COPY is off was logged, and no COPY worked since
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

// pgTypesText reads the notifications table's column types.
const pgTypesText = `SELECT attname, atttypid FROM pg_attribute ` +
	`WHERE attrelid = 'notifications'::regclass AND attnum > 0 AND NOT attisdropped`

// types returns the OIDs of the notifications columns in model order, or
// errNoCopy while COPY is off or when a column is missing or of a type the
// encoder does not write (which turns COPY off for copyRecheck). Concurrent
// first calls may each read the catalog; each waits only on its own ctx.
func (p *pgCopier) types(ctx context.Context, db *sql.DB, logger *slog.Logger) ([]uint32, error) {
	p.mu.Lock()
	oids, gen, off := p.oids, p.gen, time.Now().Before(p.offUntil)
	p.mu.Unlock()
	if off {
		return nil, errNoCopy
	}
	if oids != nil {
		return oids, nil
	}
	rows, err := db.QueryContext(ctx, pgTypesText)
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
	oids = make([]uint32, len(notificationModel))
	for i, c := range notificationModel {
		oid, ok := byName[c.name]
		if !ok || !encodes(c.kind, oid) {
			p.turnOff(gen, logger, "column "+c.name+" is missing or of a type COPY does not write")
			return nil, errNoCopy
		}
		oids[i] = oid
	}
	p.mu.Lock()
	if p.gen == gen {
		p.oids = oids
	}
	p.mu.Unlock()
	return oids, nil
}

// turnOff turns COPY off for copyRecheck, unless forget ran since gen was
// read, and logs it unless that was logged and no COPY worked since.
func (p *pgCopier) turnOff(gen uint64, logger *slog.Logger, why string) {
	p.mu.Lock()
	if p.gen != gen {
		p.mu.Unlock()
		return
	}
	p.offUntil = time.Now().Add(copyRecheck)
	logged := p.offLog
	p.offLog = true
	p.mu.Unlock()
	if !logged {
		logger.Warn("sqlstore: Insert stores batches with the insert statement instead of COPY",
			"reason", why, "retry_after", copyRecheck)
	}
}

// worked notes that a COPY stored a batch.
func (p *pgCopier) worked() {
	p.mu.Lock()
	p.offLog = false
	p.mu.Unlock()
}

// forget drops the column types read and turns COPY on, to read them again
// at the next Insert (after a migration changed the table under an open
// store).
func (p *pgCopier) forget() {
	p.mu.Lock()
	p.oids, p.offUntil = nil, time.Time{}
	p.gen++
	p.mu.Unlock()
}

// generation returns the count of forget calls.
func (p *pgCopier) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
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
					u, ok := uuidBytes(f.String())
					if !ok {
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
// stored already, the batch or the table does not fit the encoder, or the
// server refused the COPY (the statement then stores the batch, or
// reports the error in its own words).
func (h *handle) copyInsert(ctx context.Context, rows []notificationRow) ([]string, error) {
	gen := h.pgCopy.generation()
	oids, err := h.pgCopy.types(ctx, h.writer(), h.logger)
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
		case pe.Code == "0A000": // feature_not_supported: COPY as such, e.g. under row-level security
			h.pgCopy.turnOff(gen, h.logger, "the server refuses COPY ("+pe.Code+"): "+pe.Message)
		case strings.HasPrefix(pe.Code, "42"), pe.Code == "22P03", pe.Code == "08P01":
			// The table changed under the store: a column of another
			// type (a field of the wrong size), or gone.
			h.pgCopy.forget()
		}
		// Any refusal: the statement is the reference, and a real error
		// shows there with its own text (a value the column refuses, class
		// 22, say).
		return nil, errNoCopy
	}
	if err != nil {
		return nil, err
	}
	h.pgCopy.worked()
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = strings.ToLower(rows[i].ID)
	}
	return ids, nil
}
