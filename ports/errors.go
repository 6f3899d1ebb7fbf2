package ports

import "errors"

// Sentinel errors shared by every port. Adapters and the core wrap them with
// context (fmt.Errorf("...: %w", ErrNotFound)); transports map them to HTTP or
// gRPC codes once, at the edge, with errors.Is.
var (
	// ErrNotFound reports that the requested notification, list or channel
	// does not exist.
	ErrNotFound = errors.New("not found")

	// ErrInvalid reports bad input: a malformed id, an oversize field, an
	// unknown filter value. The error text says which field and why.
	ErrInvalid = errors.New("invalid input")

	// ErrConflict reports a request the current state refuses, such as an
	// illegal lifecycle move (discarding a Delivered notification).
	ErrConflict = errors.New("conflict")

	// ErrUnavailable reports that the request cannot be served now but may
	// succeed if repeated: a site node with no Raft leader, central out of
	// reach. Nothing was changed.
	ErrUnavailable = errors.New("unavailable")

	// ErrUnauthenticated reports a caller that did not prove who it is (no
	// or an unknown client certificate or token).
	ErrUnauthenticated = errors.New("unauthenticated")

	// ErrForbidden reports an authenticated caller whose role does not
	// allow the request (a viewer asking to retry).
	ErrForbidden = errors.New("forbidden")
)
