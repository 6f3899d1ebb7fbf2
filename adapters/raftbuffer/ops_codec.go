package raftbuffer

import (
	"crypto/rand"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// opV1 is the version byte in front of every operation stored in the ops
// bucket.
const opV1 byte = 1

// The bounds of one cached operation.
const (
	// maxOpPayload bounds a payload: a call's params, or a write's SQL text
	// and args, together.
	maxOpPayload = 1 << 20
	// maxOpText bounds the other text of a row together: kind, target,
	// method, last error and provenance.
	maxOpText = 64 << 10
)

// maxPurgeOps bounds the rows one PurgeOps command removes; a larger
// Purge removes that many and says so, the caller purges again.
const maxPurgeOps = 10000

// encodePutOps returns the PutOps command for changes, with a fresh feed
// nonce (the epoch of a feed it would start).
func encodePutOps(changes []*pb.OpChange) ([]byte, error) {
	nonce := make([]byte, feedNonceLen)
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return encode(cmdPutOps, &pb.PutOps{Changes: changes, FeedNonce: nonce})
}

// encodePurgeOps returns the PurgeOps command.
func encodePurgeOps(cutoff *pb.Time, limit uint32) ([]byte, error) {
	return encode(cmdPurgeOps, &pb.PurgeOps{Cutoff: cutoff, Limit: limit})
}

// checkChange refuses a change the store does not keep: an empty or
// over-long id, an unknown kind, status or from-status, a payload over
// maxOpPayload, other text over maxOpText, text that is not UTF-8. The
// state machine checks again what a command carries.
func checkChange(c *pb.OpChange) error {
	op := c.GetOp()
	if err := checkID(op.GetId()); err != nil {
		return err
	}
	switch k := ports.OpKind(op.GetKind()); k {
	case ports.OpCall, ports.OpWrite:
	default:
		return fmt.Errorf("unknown kind %q: %w", clipText(string(k)), ports.ErrInvalid)
	}
	if st := ports.OpStatus(op.GetStatus()); !st.Valid() {
		return fmt.Errorf("unknown status %q: %w", clipText(string(st)), ports.ErrInvalid)
	}
	if f := ports.OpStatus(c.GetFrom()); f != "" && !f.Valid() {
		return fmt.Errorf("unknown from-status %q: %w", clipText(string(f)), ports.ErrInvalid)
	}
	if n := len(op.GetParams()) + len(op.GetSql()) + len(op.GetArgs()); n > maxOpPayload {
		return fmt.Errorf("payload of %d bytes is over %d: %w", n, maxOpPayload, ports.ErrInvalid)
	}
	text := []string{op.GetTarget(), op.GetMethod(), op.GetLastError(), op.GetSourceInstance(),
		op.GetSourceScript(), op.GetExecutionId(), op.GetParentExecutionId()}
	n := 0
	for _, s := range text {
		n += len(s)
	}
	if n > maxOpText {
		return fmt.Errorf("text fields of %d bytes are over %d: %w", n, maxOpText, ports.ErrInvalid)
	}
	for _, s := range append(text, op.GetId(), op.GetSql()) {
		if !utf8.ValidString(s) {
			return fmt.Errorf("text that is not UTF-8: %w", ports.ErrInvalid)
		}
	}
	return nil
}

// clipText shortens a value quoted in an error text.
func clipText(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}

// encodeOp returns the stored form of one operation.
func encodeOp(op *pb.Operation) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte{opV1}, op)
	if err != nil {
		return nil, fmt.Errorf("encode operation: %w", err)
	}
	return b, nil
}

// decodeOp reads one stored operation.
func decodeOp(b []byte) (*pb.Operation, error) {
	if len(b) == 0 || b[0] != opV1 {
		return nil, fmt.Errorf("stored operation has an unknown format")
	}
	var m pb.Operation
	if err := proto.Unmarshal(b[1:], &m); err != nil {
		return nil, fmt.Errorf("decode stored operation: %w", err)
	}
	return &m, nil
}

// opToPB converts an operation to its wire form; Version is the store's
// and is not carried.
func opToPB(o ports.Operation) *pb.Operation {
	return &pb.Operation{
		Id:                o.ID,
		Kind:              string(o.Kind),
		Target:            o.Target,
		Method:            o.Method,
		Status:            string(o.Status),
		RetryCount:        int64(o.RetryCount),
		LastError:         o.LastError,
		NextAttemptAt:     timeToPB(o.NextAttemptAt),
		SourceInstance:    o.SourceInstance,
		SourceScript:      o.SourceScript,
		ExecutionId:       o.ExecutionID,
		ParentExecutionId: o.ParentExecutionID,
		CreatedAt:         timeToPB(o.CreatedAt),
		UpdatedAt:         timeToPB(o.UpdatedAt),
		TerminalAt:        timeToPB(o.TerminalAt),
		Params:            o.Payload.Params,
		Sql:               o.Payload.SQL,
		Args:              o.Payload.Args,
	}
}

// opFromPB converts the stored form back; times come back in UTC, empty
// payload bytes as nil.
func opFromPB(m *pb.Operation) ports.Operation {
	o := ports.Operation{
		ID:                m.GetId(),
		Kind:              ports.OpKind(m.GetKind()),
		Target:            m.GetTarget(),
		Method:            m.GetMethod(),
		Status:            ports.OpStatus(m.GetStatus()),
		RetryCount:        int(m.GetRetryCount()),
		LastError:         m.GetLastError(),
		NextAttemptAt:     timeFromPB(m.GetNextAttemptAt()),
		SourceInstance:    m.GetSourceInstance(),
		SourceScript:      m.GetSourceScript(),
		ExecutionID:       m.GetExecutionId(),
		ParentExecutionID: m.GetParentExecutionId(),
		CreatedAt:         timeFromPB(m.GetCreatedAt()),
		UpdatedAt:         timeFromPB(m.GetUpdatedAt()),
		TerminalAt:        timeFromPB(m.GetTerminalAt()),
		Payload:           ports.OpPayload{SQL: m.GetSql()},
		Version:           m.GetVersion(),
	}
	if len(m.GetParams()) > 0 {
		o.Payload.Params = m.GetParams()
	}
	if len(m.GetArgs()) > 0 {
		o.Payload.Args = m.GetArgs()
	}
	return o
}
