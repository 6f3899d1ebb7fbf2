// Package opgateway delivers a site's cached operations to their targets:
// it implements ports.OpGateway over the external systems (HTTP) and the
// database connections (PostgreSQL, MS SQL, SQLite) a Config defines.
//
// # Configuration
//
// Config binds to the site's YAML (systems:, connections:). A zero field
// takes its default (WithDefaults: a 30 s timeout, 10 retries, one minute
// between retries); Validate reports one *ports.FieldError per broken
// rule on its Go path ("Systems[0].Methods[1].Path"); New applies both and
// checks every secret reference against the caller's secretref.Policy
// without reading it. Secrets are references, never values: a system's
// token, password or header value, and a connection's whole DSN. A
// system's token is resolved at each call (a rotated file is used at
// once), a DSN when its pool opens; one that does not resolve makes the
// attempt Transient, naming the reference.
//
// # Calls
//
// A method's path template ("/orders/{id}") is appended to the system's
// base URL; each {name} is filled with the call's parameter of that name
// (a string, number or boolean; not empty, "." or ".."), path-escaped, so
// that no value adds a segment, a query or another host. The other
// parameters go to the query for GET and DELETE (a scalar is one value,
// an array of scalars one value per element, null none, an object is
// refused) and to a JSON object body for POST, PUT and PATCH, as given.
// Every call carries the operation's id as Idempotency-Key, so that a
// system can recognise the repeat of a call whose answer was lost.
// Redirects are not followed.
//
// Classification: 2xx is Success, its body the Answer (JSON as it is,
// anything else as a JSON string, empty as null, over MaxAnswerBytes as
// AnswerDropped); connection errors, timeouts, 408, 429 and 5xx are
// Transient, with the system's Retry-After (seconds or an HTTP date,
// capped at MaxRetryAfter); any other status is Permanent. Error texts
// name the method's verb and template, never the filled URL, the query,
// an address, the auth header or a secret, and quote at most a short,
// sanitised part of the system's answer.
//
// # Writes
//
// A write is SQL text with the driver's placeholders and Args, a JSON
// array of scalars decoded into driver values (strings, booleans, nil,
// int64 for a number without fraction or exponent, float64 otherwise);
// values are never spliced into the text. Each connection has one pool,
// opened at its first write; each attempt runs in a transaction of its
// own, bounded by the connection's timeout, and answers
// {"rows_affected":N}.
//
// Classification: timeouts, connection errors, deadlocks (PostgreSQL
// 40P01, MS SQL 1205), serialization failures (40001), shutdowns and
// connection failures (57P01-57P03, class 08), lack of resources (class
// 53), SQLite's busy and locked are Transient, and so is any error not
// known; integrity constraints (class 23; MS SQL 2627, 2601, 547), syntax
// and access errors (class 42; MS SQL 102, 156, 207, 208), bad data
// (class 22), SQLite's constraint, SQL, mismatch, range and too-big
// errors, and the client-side refusal of arguments that do not fit the
// statement (a count that differs) are Permanent.
//
// # Exactly once
//
// A connection with ExactlyOnce records the operation's id in MarkerTable
// (id primary key, applied_at), inside the write's transaction and before
// the write: an attempt that finds the id recorded writes nothing, rolls
// back and answers Success with {"rows_affected":0,"already_applied":true};
// two attempts at once wait on the row's key, and one applies. The table
// is created when missing (CREATE TABLE IF NOT EXISTS, once per pool), so
// the connection's user needs the right to create it — or a DBA creates it
// beforehand, and then INSERT on it is enough. The rows are never removed
// by the gateway: a row older than the longest time an operation can stay
// buffered (its retries, and parked time an operator may retry) may be
// deleted by the operator.
package opgateway
