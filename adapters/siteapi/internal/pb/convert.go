package pb

import (
	"time"

	"github.com/siteline/outbox/ports"
)

// SendRequestToPB converts a ports.SendRequest to its wire form.
func SendRequestToPB(r ports.SendRequest) *SendRequest {
	return &SendRequest{
		Id:                r.ID,
		List:              r.List,
		Subject:           r.Subject,
		Body:              r.Body,
		SourceInstance:    r.SourceInstance,
		SourceScript:      r.SourceScript,
		ExecutionId:       r.ExecutionID,
		ParentExecutionId: r.ParentExecutionID,
	}
}

// SendRequestFromPB converts a wire SendRequest to a ports.SendRequest.
func SendRequestFromPB(r *SendRequest) ports.SendRequest {
	return ports.SendRequest{
		ID:                r.GetId(),
		List:              r.GetList(),
		Subject:           r.GetSubject(),
		Body:              r.GetBody(),
		SourceInstance:    r.GetSourceInstance(),
		SourceScript:      r.GetSourceScript(),
		ExecutionID:       r.GetExecutionId(),
		ParentExecutionID: r.GetParentExecutionId(),
	}
}

// StatusesToPB converts a status map to its wire form.
func StatusesToPB(m map[string]ports.Status) *StatusResponse {
	out := make(map[string]string, len(m))
	for id, st := range m {
		out[id] = string(st)
	}
	return &StatusResponse{Statuses: out}
}

// StatusesFromPB converts a wire StatusResponse to a status map.
func StatusesFromPB(r *StatusResponse) map[string]ports.Status {
	out := make(map[string]ports.Status, len(r.GetStatuses()))
	for id, st := range r.GetStatuses() {
		out[id] = ports.Status(st)
	}
	return out
}

// HealthToPB converts a ports.SiteHealth to its wire form.
func HealthToPB(h ports.SiteHealth) *HealthResponse {
	return &HealthResponse{
		Site:                     h.Site,
		Node:                     h.Node,
		Backlog:                  h.Backlog,
		OldestEnqueuedAtMicros:   micros(h.OldestEnqueuedAt),
		LastCentralContactMicros: micros(h.LastCentralContact),
		LastCentralError:         h.LastCentralError,
		Replica: &Replica{
			Node:   h.Replica.Node,
			Role:   string(h.Replica.Role),
			Term:   h.Replica.Term,
			Leader: h.Replica.Leader,
		},
	}
}

// HealthFromPB converts a wire HealthResponse to a ports.SiteHealth.
func HealthFromPB(r *HealthResponse) ports.SiteHealth {
	return ports.SiteHealth{
		Site:               r.GetSite(),
		Node:               r.GetNode(),
		Backlog:            r.GetBacklog(),
		OldestEnqueuedAt:   fromMicros(r.GetOldestEnqueuedAtMicros()),
		LastCentralContact: fromMicros(r.GetLastCentralContactMicros()),
		LastCentralError:   r.GetLastCentralError(),
		Replica: ports.ReplicaState{
			Node:   r.GetReplica().GetNode(),
			Role:   ports.Role(r.GetReplica().GetRole()),
			Term:   r.GetReplica().GetTerm(),
			Leader: r.GetReplica().GetLeader(),
		},
	}
}

// micros is t in Unix microseconds, 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// fromMicros is the UTC time of Unix microseconds us, the zero time for 0.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}
