package sqlstore

import (
	"database/sql"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// builderDialect is a bun dialect whose Init asks the server nothing.
// bun.NewDB calls Init, which on MS SQL queries the server's version (and
// only logs it); the directory, the accounts and the admin audit wrap their
// pools in a bun.DB per call, so they use this.
type builderDialect struct{ schema.Dialect }

// Init implements schema.Dialect: nothing to do.
func (builderDialect) Init(*sql.DB) {}

// queries returns a bun.DB over sqldb in the store's dialect, which builds
// the statements of the directory, the accounts and the admin audit and,
// unless they are given a transaction with Conn, runs them on sqldb.
func (s *handle) queries(sqldb *sql.DB) *bun.DB {
	return bun.NewDB(sqldb, builderDialect{s.g.d})
}
