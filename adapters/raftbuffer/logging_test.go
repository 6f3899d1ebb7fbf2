package raftbuffer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestRaftLevel(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		level hclog.Level
		msg   string
		args  []any
		want  hclog.Level
	}{
		{hclog.Error, "failed to decode incoming command", []any{"error", reset}, hclog.Warn},
		{hclog.Error, "failed to decode incoming command", []any{"error", fmt.Errorf("read: %w", net.ErrClosed)}, hclog.Warn},
		{hclog.Error, "failed to decode incoming command", []any{"error", io.ErrUnexpectedEOF}, hclog.Warn},
		{hclog.Error, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, hclog.Warn},
		{hclog.Error, "failed to decode incoming command", []any{"error", errors.New("unknown rpc type 9")}, hclog.Error},
		{hclog.Error, "failed to decode incoming command", nil, hclog.Error},
		{hclog.Error, "peer has newer term, stopping replication", []any{"peer", "a"}, hclog.Info},
		{hclog.Error, "failed to appendEntries to", []any{"peer", "a", "error", io.EOF}, hclog.Warn},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "a", "error", reset}, hclog.Warn},
		{hclog.Error, "failed to make requestVote RPC", []any{"error", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, hclog.Warn},
		{hclog.Error, "failed to appendEntries to", []any{"error", errors.New("rpc error: log not found")}, hclog.Error},
		{hclog.Error, "failed to commit logs", []any{"error", reset}, hclog.Error},
		{hclog.Warn, "heartbeat timeout reached, starting election", nil, hclog.Warn},
	} {
		if got := raftLevel(c.level, c.msg, c.args); got != c.want {
			t.Errorf("raftLevel(%v, %q, %v) = %v, want %v", c.level, c.msg, c.args, got, c.want)
		}
	}
}
