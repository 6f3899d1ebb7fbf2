package raftbuffer

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftLevel lowers the lines raft logs as errors that report the ordinary
// life of a group, so that an ERROR in the log means something is wrong:
//
//   - "failed to decode incoming command" with a closed or reset connection:
//     a peer stopped or restarted (raft already keeps quiet about a clean
//     EOF) — a warning;
//   - a call to a peer (append entries, heartbeat, pipeline, vote) that
//     failed because the peer is gone or refuses connections: it stopped or
//     restarted; the group goes on with its quorum, the site's health says
//     which peers answer, and raft retries — a warning;
//   - "peer has newer term, stopping replication": a leader learning that an
//     election moved on (a witness handing over, a partition healed) —
//     information.
//
// Every other line keeps raft's level.
func raftLevel(level hclog.Level, msg string, args []any) hclog.Level {
	if level != hclog.Error {
		return level
	}
	switch msg {
	case "peer has newer term, stopping replication":
		return hclog.Info
	case "failed to decode incoming command", "failed to accept connection":
		if peerGone(argError(args)) {
			return hclog.Warn
		}
	case "failed to appendEntries to", "failed to heartbeat to", "failed to pipeline appendEntries",
		"failed to start pipeline replication to", "failed to make requestVote RPC":
		if err := argError(args); peerGone(err) || errors.Is(err, syscall.ECONNREFUSED) {
			return hclog.Warn
		}
	}
	return level
}

// argError returns the value of the "error" argument, if it is an error.
func argError(args []any) error {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			err, _ := args[i+1].(error)
			return err
		}
	}
	return nil
}

// peerGone reports an error that means the other end of a connection went
// away or this transport is shutting down.
func peerGone(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, raft.ErrTransportShutdown):
		return true
	}
	// Some wrappers keep only the text.
	s := err.Error()
	return strings.Contains(s, "connection reset by peer") || strings.Contains(s, "use of closed network connection") ||
		strings.Contains(s, "broken pipe") || strings.Contains(s, "transport shutdown")
}
