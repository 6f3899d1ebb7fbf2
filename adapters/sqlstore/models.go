package sqlstore

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/schema"

	"github.com/siteline/outbox/ports"
)

// The rows of the notifications and audit tables are bun models: their
// struct tags are the one list of the tables' columns. Every statement
// reads its columns from them — bun's builders directly, the hand-written
// statements of the dialect files through modelColumns — so a new column is
// a field here (and a migration).

// notificationRow is one row of the notifications table, in the column
// order of the table.
type notificationRow struct {
	bun.BaseModel `bun:"table:notifications,alias:n"`

	ID                string   `bun:"id,pk,type:uuid"`
	Type              string   `bun:"type"`
	List              string   `bun:"list"`
	Subject           string   `bun:"subject"`
	Body              string   `bun:"body"`
	TypeData          nullText `bun:"type_data"`
	Priority          int64    `bun:"priority"`
	Status            string   `bun:"status"`
	RetryCount        int64    `bun:"retry_count"`
	LastError         string   `bun:"last_error"`
	ResolvedTargets   nullText `bun:"resolved_targets"`
	SourceSite        string   `bun:"source_site"`
	SourceInstance    string   `bun:"source_instance"`
	SourceScript      string   `bun:"source_script"`
	ExecutionID       string   `bun:"execution_id"`
	ParentExecutionID string   `bun:"parent_execution_id"`
	SiteEnqueuedAt    instant  `bun:"site_enqueued_at"`
	CreatedAt         instant  `bun:"created_at"`
	UpdatedAt         instant  `bun:"updated_at"`
	LastAttemptAt     instant  `bun:"last_attempt_at"`
	NextAttemptAt     instant  `bun:"next_attempt_at"`
	DeliveredAt       instant  `bun:"delivered_at"`
	ExpiresAt         instant  `bun:"expires_at"`
	ClaimedBy         nullText `bun:"claimed_by"`
	ClaimedUntil      instant  `bun:"claimed_until"`
	TargetStates      nullText `bun:"target_states"`
}

// recordRow is what Record writes onto a row it still holds: the columns
// of an outcome, joined on id.
type recordRow struct {
	bun.BaseModel `bun:"table:notifications"`

	ID              string   `bun:"id,pk,type:uuid"`
	Status          string   `bun:"status"`
	RetryCount      int64    `bun:"retry_count"`
	LastError       string   `bun:"last_error"`
	ResolvedTargets nullText `bun:"resolved_targets"`
	TargetStates    nullText `bun:"target_states"`
	LastAttemptAt   instant  `bun:"last_attempt_at"`
	NextAttemptAt   instant  `bun:"next_attempt_at"`
	DeliveredAt     instant  `bun:"delivered_at"`
	UpdatedAt       instant  `bun:"updated_at"`
}

// auditRow is one record of the notification_audit table (whose id, an
// identity, the store never writes).
type auditRow struct {
	bun.BaseModel `bun:"table:notification_audit,alias:a"`

	NotificationID string   `bun:"notification_id,type:uuid"`
	At             instant  `bun:"at"`
	Kind           string   `bun:"kind"`
	Actor          string   `bun:"actor"`
	Outcome        string   `bun:"outcome"`
	Status         string   `bun:"status"`
	DurationUS     int64    `bun:"duration_us"`
	Error          string   `bun:"error"`
	Targets        nullText `bun:"targets"`
	SourceSite     string   `bun:"source_site"`
	Type           string   `bun:"type"`
}

// tables holds the models' bun tables for modelColumns (their
// column names and field indexes do not depend on the dialect). A tag's
// type is the PostgreSQL type where it is not text, bigint or timestamptz
// (the arrays of postgres.go).
var tables = schema.NewTables(sqlitedialect.New())

// column is one column of a model, as the hand-written batch statements
// read it from a row: by kind, through the index of its field.
type column struct {
	name   string
	kind   columnKind
	field  int    // the index of its field in the row struct
	pgType string // the element type of its PostgreSQL array
}

type columnKind int

const (
	textColumn columnKind = iota
	intColumn
	nullTextColumn
	instantColumn
)

// modelColumns returns the columns of model (a nil pointer to a row type)
// in their order. The field types are the four of columnKind.
func modelColumns(model any) []column {
	t := tables.Get(reflect.TypeOf(model).Elem())
	cols := make([]column, len(t.Fields))
	for i, f := range t.Fields {
		pgType, _ := f.Tag.Option("type")
		c := column{name: f.Name, field: f.Index[0], pgType: pgType}
		switch typ := f.StructField.Type; {
		case len(f.Index) != 1:
			panic("sqlstore: model " + t.TypeName + " embeds field " + f.GoName)
		case typ == reflect.TypeFor[instant]():
			c.kind, c.pgType = instantColumn, cmp.Or(c.pgType, "timestamptz")
		case typ == reflect.TypeFor[nullText]():
			c.kind, c.pgType = nullTextColumn, cmp.Or(c.pgType, "text")
		case typ.Kind() == reflect.String:
			c.kind, c.pgType = textColumn, cmp.Or(c.pgType, "text")
		case typ.Kind() == reflect.Int64:
			c.kind, c.pgType = intColumn, cmp.Or(c.pgType, "bigint")
		default:
			panic("sqlstore: model " + t.TypeName + " has field " + f.GoName + " of type " + typ.String())
		}
		cols[i] = c
	}
	return cols
}

// names returns the names of cols.
func names(cols []column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return out
}

// The columns of each model, and their names.
var (
	notificationModel = modelColumns((*notificationRow)(nil))
	recordModel       = modelColumns((*recordRow)(nil))
	auditModel        = modelColumns((*auditRow)(nil))
)

var (
	notificationColumns = names(notificationModel)
	recordColumns       = names(recordModel)
	auditColumns        = names(auditModel)
)

// --- conversions ---------------------------------------------------------------

// noNUL reports the first text of vs that holds a NUL byte, which no
// dialect stores, as ErrInvalid.
func noNUL(vs ...string) error {
	for _, v := range vs {
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("sqlstore: text %.40q holds a NUL byte: %w", v, ports.ErrInvalid)
		}
	}
	return nil
}

func jsonStrings(v []string) (nullText, error) {
	if v == nil {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("sqlstore: encode resolved targets: %w", err)
	}
	return nullText(b), nil
}

// toRow is the row of n, or ErrInvalid when a text of n holds a NUL byte.
func toRow(n *ports.Notification) (notificationRow, error) {
	targets, err := jsonStrings(n.ResolvedTargets)
	if err != nil {
		return notificationRow{}, err
	}
	states, err := encodeTargetStates(n.ID, n.Targets)
	if err != nil {
		return notificationRow{}, err
	}
	r := notificationRow{
		ID: n.ID, Type: n.Type, List: n.List, Subject: n.Subject, Body: n.Body,
		TypeData: nullText(n.TypeData), Priority: int64(n.Priority), Status: string(n.Status),
		RetryCount: int64(n.RetryCount), LastError: n.LastError, ResolvedTargets: targets,
		SourceSite: n.SourceSite, SourceInstance: n.SourceInstance, SourceScript: n.SourceScript,
		ExecutionID: n.ExecutionID, ParentExecutionID: n.ParentExecutionID,
		SiteEnqueuedAt: at(n.SiteEnqueuedAt), CreatedAt: at(n.CreatedAt), UpdatedAt: at(n.UpdatedAt),
		LastAttemptAt: at(n.LastAttemptAt), NextAttemptAt: at(n.NextAttemptAt), DeliveredAt: at(n.DeliveredAt),
		ExpiresAt: at(n.ExpiresAt), ClaimedBy: nullText(n.ClaimedBy), ClaimedUntil: at(n.ClaimedUntil),
		TargetStates: states,
	}
	return r, noNUL(r.ID, r.Type, r.List, r.Subject, r.Body, string(r.TypeData), r.Status, r.LastError,
		string(r.ResolvedTargets), r.SourceSite, r.SourceInstance, r.SourceScript, r.ExecutionID,
		r.ParentExecutionID, string(r.ClaimedBy))
}

// notification is the ports value of r.
func (r *notificationRow) notification() (ports.Notification, error) {
	n := ports.Notification{
		ID: r.ID, Type: r.Type, List: r.List, Subject: r.Subject, Body: r.Body,
		Priority: int(r.Priority), Status: ports.Status(r.Status), RetryCount: int(r.RetryCount),
		LastError: r.LastError, SourceSite: r.SourceSite, SourceInstance: r.SourceInstance,
		SourceScript: r.SourceScript, ExecutionID: r.ExecutionID, ParentExecutionID: r.ParentExecutionID,
		SiteEnqueuedAt: r.SiteEnqueuedAt.t, CreatedAt: r.CreatedAt.t, UpdatedAt: r.UpdatedAt.t,
		LastAttemptAt: r.LastAttemptAt.t, NextAttemptAt: r.NextAttemptAt.t, DeliveredAt: r.DeliveredAt.t,
		ExpiresAt: r.ExpiresAt.t, ClaimedBy: string(r.ClaimedBy), ClaimedUntil: r.ClaimedUntil.t,
	}
	if r.TypeData != "" {
		n.TypeData = json.RawMessage(r.TypeData)
	}
	if r.ResolvedTargets != "" {
		if err := json.Unmarshal([]byte(r.ResolvedTargets), &n.ResolvedTargets); err != nil {
			return ports.Notification{}, fmt.Errorf("decode resolved_targets of %s: %w", n.ID, err)
		}
	}
	var err error
	if n.Targets, err = decodeTargetStates(n.ID, r.TargetStates); err != nil {
		return ports.Notification{}, err
	}
	return n, nil
}

// notifications converts rows.
func notifications(rows []notificationRow) ([]ports.Notification, error) {
	ns := make([]ports.Notification, len(rows))
	for i := range rows {
		var err error
		if ns[i], err = rows[i].notification(); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// toRecordRow is the row Record writes for u.
func toRecordRow(u *ports.Update) (recordRow, error) {
	targets, err := jsonStrings(u.ResolvedTargets)
	if err != nil {
		return recordRow{}, err
	}
	states, err := encodeTargetStates(u.ID, u.Targets)
	if err != nil {
		return recordRow{}, err
	}
	r := recordRow{
		ID: u.ID, Status: string(u.Status), RetryCount: int64(u.RetryCount), LastError: u.LastError,
		ResolvedTargets: targets, TargetStates: states, LastAttemptAt: at(u.LastAttemptAt), NextAttemptAt: at(u.NextAttemptAt),
		DeliveredAt: at(u.DeliveredAt), UpdatedAt: at(u.UpdatedAt),
	}
	return r, noNUL(r.ID, r.Status, r.LastError, string(r.ResolvedTargets))
}

func toAuditRow(r *ports.AuditRecord) (auditRow, error) {
	targets, err := encodeAuditTargets(r.NotificationID, r.Targets)
	if err != nil {
		return auditRow{}, err
	}
	a := auditRow{
		NotificationID: r.NotificationID, At: at(r.At), Kind: string(r.Kind), Actor: r.Actor,
		Outcome: string(r.Outcome), Status: string(r.Status), DurationUS: r.Duration.Microseconds(), Error: r.Error,
		Targets: targets, SourceSite: r.SourceSite, Type: r.Type,
	}
	return a, noNUL(a.NotificationID, a.Kind, a.Actor, a.Outcome, a.Status, a.Error, a.SourceSite, a.Type)
}

func (a *auditRow) record() (ports.AuditRecord, error) {
	targets, err := decodeAuditTargets(a.NotificationID, a.Targets)
	return ports.AuditRecord{
		NotificationID: a.NotificationID, At: a.At.t, Kind: ports.AuditKind(a.Kind), Actor: a.Actor,
		Outcome: ports.Outcome(a.Outcome), Status: ports.Status(a.Status),
		Duration: time.Duration(a.DurationUS) * time.Microsecond, Error: a.Error, Targets: targets,
		SourceSite: a.SourceSite, Type: a.Type,
	}, err
}
