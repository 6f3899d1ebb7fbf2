// Package migrations embeds the SQL schema of the store, one directory per
// dialect (sqlite, postgres, mssql), in the form github.com/uptrace/bun/migrate
// discovers: NNNN_name.tx.up.sql and NNNN_name.tx.down.sql, statements
// separated by "--bun:split" lines. bun/migrate discovers them; the store
// (adapters/sqlstore, migrate.go) runs each file's statements as written, in
// one transaction that also records the migration, under its migration lock.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql mssql/*.sql
var files embed.FS

// Dialects lists the dialect names FS accepts.
var Dialects = []string{"sqlite", "postgres", "mssql"}

// FS returns the migration files of dialect ("sqlite", "postgres" or "mssql"),
// rooted at the dialect's directory.
func FS(dialect string) (fs.FS, error) {
	switch dialect {
	case "sqlite", "postgres", "mssql":
		sub, err := fs.Sub(files, dialect)
		if err != nil {
			return nil, fmt.Errorf("migrations: open %s: %w", dialect, err)
		}
		return sub, nil
	default:
		return nil, fmt.Errorf("migrations: unknown dialect %q (valid: sqlite, postgres, mssql)", dialect)
	}
}
