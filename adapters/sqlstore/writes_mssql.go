package sqlstore

import (
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// mssqlWrites are the writes of MS SQL, which has no INSERT ... ON
// CONFLICT: a MERGE for the upsert and INSERT ... SELECT ... WHERE NOT
// EXISTS for the insert of a new row, each with the hints that make its
// check and its write one step against concurrent writers of the same key
// (HOLDLOCK; UPDLOCK, HOLDLOCK), and OUTPUT for RETURNING.
type mssqlWrites struct{}

// columns returns the columns of t as one list, each prefixed with prefix
// (an alias and a dot, or "").
func columns(t *schema.Table, prefix string) bun.Safe {
	var b []byte
	for i, f := range t.Fields {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, prefix...)
		b = append(b, f.SQLName...)
	}
	return bun.Safe(b)
}

// upsert: MERGE ... WITH (HOLDLOCK), the row as a VALUES source.
func (mssqlWrites) upsert(db *bun.DB, c bun.IConn, model any) executor {
	t := modelTable(db, model)
	var on []byte
	for i, pk := range t.PKs {
		if i > 0 {
			on = append(on, " AND "...)
		}
		on = fmt.Appendf(on, "t.%s = v.%s", pk.SQLName, pk.SQLName)
	}
	var set []byte
	for _, f := range t.DataFields {
		if len(set) > 0 {
			set = append(set, ", "...)
		}
		set = append(set, f.SQLName...)
		set = append(set, " = v."...)
		set = append(set, f.SQLName...)
	}
	return db.NewRaw("MERGE INTO ? WITH (HOLDLOCK) AS t USING (?) AS v (?) ON ? "+
		"WHEN MATCHED THEN UPDATE SET ? WHEN NOT MATCHED THEN INSERT (?) VALUES (?);",
		t.SQLName, db.NewValues(model), columns(t, ""), bun.Safe(on),
		bun.Safe(set), columns(t, ""), columns(t, "v.")).Conn(c)
}

// insertNew: INSERT ... SELECT ... WHERE NOT EXISTS, reading the unique
// columns WITH (UPDLOCK, HOLDLOCK).
func (mssqlWrites) insertNew(db *bun.DB, c bun.IConn, model any, unique ...string) executor {
	t := modelTable(db, model)
	var match []byte
	for i, u := range unique {
		if i > 0 {
			match = append(match, " OR "...)
		}
		match = append(match, "t."...)
		match = db.QueryGen().AppendIdent(match, u)
		match = append(match, " = v."...)
		match = db.QueryGen().AppendIdent(match, u)
	}
	return db.NewRaw("INSERT INTO ? (?) SELECT ? FROM (?) AS v (?) "+
		"WHERE NOT EXISTS (SELECT 1 FROM ? AS t WITH (UPDLOCK, HOLDLOCK) WHERE ?)",
		t.SQLName, columns(t, ""), columns(t, "v."), db.NewValues(model), columns(t, ""),
		t.SQLName, bun.Safe(match)).Conn(c)
}

// returningID: OUTPUT inserted."id".
func (mssqlWrites) returningID(q *bun.InsertQuery) *bun.InsertQuery {
	return q.Returning("inserted.?", bun.Ident("id"))
}
