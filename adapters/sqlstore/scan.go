package sqlstore

// dbTime is the instant scanner of directory.go, accounts.go and
// adminaudit.go.
type dbTime = instant
