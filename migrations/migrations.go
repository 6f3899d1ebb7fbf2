// Package migrations embeds the SQL schema of the store, one directory per
// dialect (sqlite, postgres, mssql).
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
