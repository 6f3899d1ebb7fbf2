package raftbuffer

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/siteline/outbox/adapters/raftbuffer/internal/pb"
	"github.com/siteline/outbox/ports"
)

// A command in the Raft log is one type byte followed by the protobuf message
// of that type. The byte doubles as the format version: a change old nodes
// cannot read gets a new byte, never a new meaning for an old one.
const (
	cmdAppend   byte = 1
	cmdRemove   byte = 2
	cmdPutOps   byte = 3
	cmdPurgeOps byte = 4
)

// itemV1 is the version byte in front of every notification stored in the
// items bucket.
const itemV1 byte = 1

// maxIDLen is the longest id the buffer keeps (bbolt keys are limited to
// 32 KiB; a site's ids are 36-byte UUIDs).
const maxIDLen = 1024

// errUnknownCommand is the FSM's answer to a log entry it cannot read.
var errUnknownCommand = errors.New("unknown command")

// command is one decoded log entry: exactly one field is set.
type command struct {
	append   *pb.Append
	remove   *pb.Remove
	putOps   *pb.PutOps
	purgeOps *pb.PurgeOps
}

// encodeAppend returns the Append command for ns.
func encodeAppend(ns []*pb.Submission) ([]byte, error) {
	return encode(cmdAppend, &pb.Append{Notifications: ns})
}

// encodeRemove returns the Remove command for ids.
func encodeRemove(ids []string) ([]byte, error) {
	return encode(cmdRemove, &pb.Remove{Ids: ids})
}

func encode(kind byte, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte{kind}, m)
	if err != nil {
		// Only text that is not valid UTF-8 fails to encode.
		return nil, fmt.Errorf("encode command: %w: %w", err, ports.ErrInvalid)
	}
	return b, nil
}

// decodeCommand reads one log entry's data. It never panics: anything it
// cannot read is an error wrapping errUnknownCommand or the protobuf
// decoder's error.
func decodeCommand(data []byte) (command, error) {
	if len(data) == 0 {
		return command{}, fmt.Errorf("empty command: %w", errUnknownCommand)
	}
	switch data[0] {
	case cmdAppend:
		var m pb.Append
		if err := proto.Unmarshal(data[1:], &m); err != nil {
			return command{}, fmt.Errorf("decode append command: %w", err)
		}
		return command{append: &m}, nil
	case cmdRemove:
		var m pb.Remove
		if err := proto.Unmarshal(data[1:], &m); err != nil {
			return command{}, fmt.Errorf("decode remove command: %w", err)
		}
		return command{remove: &m}, nil
	case cmdPutOps:
		var m pb.PutOps
		if err := proto.Unmarshal(data[1:], &m); err != nil {
			return command{}, fmt.Errorf("decode put operations command: %w", err)
		}
		return command{putOps: &m}, nil
	case cmdPurgeOps:
		var m pb.PurgeOps
		if err := proto.Unmarshal(data[1:], &m); err != nil {
			return command{}, fmt.Errorf("decode purge operations command: %w", err)
		}
		return command{purgeOps: &m}, nil
	}
	return command{}, fmt.Errorf("command type %d: %w", data[0], errUnknownCommand)
}

// encodeItem returns the stored form of one notification.
func encodeItem(s *pb.Submission) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte{itemV1}, s)
	if err != nil {
		return nil, fmt.Errorf("encode notification: %w", err)
	}
	return b, nil
}

// decodeItem reads one stored notification.
func decodeItem(b []byte) (ports.Submission, error) {
	if len(b) == 0 || b[0] != itemV1 {
		return ports.Submission{}, fmt.Errorf("stored notification has an unknown format")
	}
	var m pb.Submission
	if err := proto.Unmarshal(b[1:], &m); err != nil {
		return ports.Submission{}, fmt.Errorf("decode stored notification: %w", err)
	}
	return fromPB(&m), nil
}

// toPB converts a submission to its wire form.
func toPB(s ports.Submission) *pb.Submission {
	return &pb.Submission{
		Id:                s.ID,
		List:              s.List,
		Subject:           s.Subject,
		Body:              s.Body,
		Type:              s.Type,
		TypeData:          s.TypeData,
		Priority:          int64(s.Priority),
		ExpiresAt:         timeToPB(s.ExpiresAt),
		SourceSite:        s.SourceSite,
		SourceInstance:    s.SourceInstance,
		SourceScript:      s.SourceScript,
		ExecutionId:       s.ExecutionID,
		ParentExecutionId: s.ParentExecutionID,
		SiteEnqueuedAt:    timeToPB(s.SiteEnqueuedAt),
	}
}

// fromPB converts the wire form back; times come back in UTC.
func fromPB(m *pb.Submission) ports.Submission {
	s := ports.Submission{
		ID:                m.GetId(),
		List:              m.GetList(),
		Subject:           m.GetSubject(),
		Body:              m.GetBody(),
		Type:              m.GetType(),
		Priority:          int(m.GetPriority()),
		ExpiresAt:         timeFromPB(m.GetExpiresAt()),
		SourceSite:        m.GetSourceSite(),
		SourceInstance:    m.GetSourceInstance(),
		SourceScript:      m.GetSourceScript(),
		ExecutionID:       m.GetExecutionId(),
		ParentExecutionID: m.GetParentExecutionId(),
		SiteEnqueuedAt:    timeFromPB(m.GetSiteEnqueuedAt()),
	}
	if len(m.GetTypeData()) > 0 {
		s.TypeData = m.GetTypeData()
	}
	return s
}

func timeToPB(t time.Time) *pb.Time {
	if t.IsZero() {
		return nil
	}
	return &pb.Time{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

func timeFromPB(t *pb.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Unix(t.GetSeconds(), int64(t.GetNanos())).UTC()
}
