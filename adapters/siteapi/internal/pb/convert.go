package pb

import (
	"encoding/json"
	"fmt"
	"math"
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
		Operations: opKindsToPB(h.Operations),
	}
}

func opKindsToPB(ks []ports.OpKindStats) []*OperationKindStats {
	var out []*OperationKindStats
	for _, k := range ks {
		out = append(out, &OperationKindStats{Kind: string(k.Kind), Backlog: k.Backlog, Parked: k.Parked,
			OldestBufferedAtMicros: micros(k.OldestBufferedAt), Terminal: k.Terminal})
	}
	return out
}

// maxOpKinds bounds the kinds of a health answer a client takes: there are
// two.
const maxOpKinds = 16

func opKindsFromPB(ks []*OperationKindStats) []ports.OpKindStats {
	var out []ports.OpKindStats
	for _, k := range ks[:min(len(ks), maxOpKinds)] {
		out = append(out, ports.OpKindStats{Kind: ports.OpKind(k.GetKind()), Backlog: k.GetBacklog(), Parked: k.GetParked(),
			OldestBufferedAt: fromMicros(k.GetOldestBufferedAtMicros()), Terminal: k.GetTerminal()})
	}
	return out
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
		Operations: opKindsFromPB(r.GetOperations()),
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

// SourceToPB converts a ports.OpSource to its wire form.
func SourceToPB(s ports.OpSource) *Source {
	return &Source{
		SourceInstance:    s.SourceInstance,
		SourceScript:      s.SourceScript,
		ExecutionId:       s.ExecutionID,
		ParentExecutionId: s.ParentExecutionID,
	}
}

// SourceFromPB converts a wire Source (nil: none) to a ports.OpSource.
func SourceFromPB(s *Source) ports.OpSource {
	return ports.OpSource{
		SourceInstance:    s.GetSourceInstance(),
		SourceScript:      s.GetSourceScript(),
		ExecutionID:       s.GetExecutionId(),
		ParentExecutionID: s.GetParentExecutionId(),
	}
}

// CallRequestToPB converts a ports.CallRequest to its wire form.
func CallRequestToPB(r ports.CallRequest) *CachedCallRequest {
	return &CachedCallRequest{Id: r.ID, System: r.System, Method: r.Method, Params: r.Params, Source: SourceToPB(r.OpSource)}
}

// CallRequestFromPB converts a wire CachedCallRequest to a
// ports.CallRequest. The core checks what it holds.
func CallRequestFromPB(r *CachedCallRequest) ports.CallRequest {
	return ports.CallRequest{ID: r.GetId(), System: r.GetSystem(), Method: r.GetMethod(),
		Params: rawJSON(r.GetParams()), OpSource: SourceFromPB(r.GetSource())}
}

// WriteRequestToPB converts a ports.WriteRequest to its wire form.
func WriteRequestToPB(r ports.WriteRequest) *CachedWriteRequest {
	return &CachedWriteRequest{Id: r.ID, Connection: r.Connection, Sql: r.SQL, Args: r.Args, Source: SourceToPB(r.OpSource)}
}

// WriteRequestFromPB converts a wire CachedWriteRequest to a
// ports.WriteRequest. The core checks what it holds.
func WriteRequestFromPB(r *CachedWriteRequest) ports.WriteRequest {
	return ports.WriteRequest{ID: r.GetId(), Connection: r.GetConnection(), SQL: r.GetSql(),
		Args: rawJSON(r.GetArgs()), OpSource: SourceFromPB(r.GetSource())}
}

// rawJSON is b as JSON text, nil when empty.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// OperationToPB converts a tracking row to its wire form, without its
// payload: what a script or an operator asks about is the row, and a page of
// rows stays small.
func OperationToPB(o ports.Operation) *Operation {
	return &Operation{
		Id:                  o.ID,
		Kind:                string(o.Kind),
		Target:              o.Target,
		Method:              o.Method,
		Status:              string(o.Status),
		RetryCount:          int64(o.RetryCount),
		LastError:           o.LastError,
		NextAttemptAtMicros: micros(o.NextAttemptAt),
		Source: SourceToPB(ports.OpSource{SourceInstance: o.SourceInstance, SourceScript: o.SourceScript,
			ExecutionID: o.ExecutionID, ParentExecutionID: o.ParentExecutionID}),
		CreatedAtMicros:  micros(o.CreatedAt),
		UpdatedAtMicros:  micros(o.UpdatedAt),
		TerminalAtMicros: micros(o.TerminalAt),
		Version:          o.Version,
	}
}

// OperationFromPB converts a wire Operation (nil: the zero row) to a
// ports.Operation without payload. A retry count out of range is clamped.
func OperationFromPB(o *Operation) ports.Operation {
	src := SourceFromPB(o.GetSource())
	return ports.Operation{
		ID:                o.GetId(),
		Kind:              ports.OpKind(o.GetKind()),
		Target:            o.GetTarget(),
		Method:            o.GetMethod(),
		Status:            ports.OpStatus(o.GetStatus()),
		RetryCount:        int(min(max(o.GetRetryCount(), 0), math.MaxInt32)),
		LastError:         o.GetLastError(),
		NextAttemptAt:     fromMicros(o.GetNextAttemptAtMicros()),
		SourceInstance:    src.SourceInstance,
		SourceScript:      src.SourceScript,
		ExecutionID:       src.ExecutionID,
		ParentExecutionID: src.ParentExecutionID,
		CreatedAt:         fromMicros(o.GetCreatedAtMicros()),
		UpdatedAt:         fromMicros(o.GetUpdatedAtMicros()),
		TerminalAt:        fromMicros(o.GetTerminalAtMicros()),
		Version:           o.GetVersion(),
	}
}

// OutcomeToPB converts a ports.OpOutcome to its wire form.
func OutcomeToPB(o ports.OpOutcome) *OperationOutcome {
	return &OperationOutcome{Operation: OperationToPB(o.Operation), Answer: o.Answer}
}

// OutcomeFromPB converts a wire OperationOutcome to a ports.OpOutcome.
func OutcomeFromPB(o *OperationOutcome) ports.OpOutcome {
	return ports.OpOutcome{Operation: OperationFromPB(o.GetOperation()), Answer: rawJSON(o.GetAnswer())}
}

// TrackingToPB converts the rows Tracking found to their wire form.
func TrackingToPB(m map[string]ports.Operation) *TrackingResponse {
	out := make(map[string]*Operation, len(m))
	for id, op := range m {
		out[id] = OperationToPB(op)
	}
	return &TrackingResponse{Operations: out}
}

// TrackingFromPB converts a wire TrackingResponse to the rows by id.
func TrackingFromPB(r *TrackingResponse) map[string]ports.Operation {
	out := make(map[string]ports.Operation, len(r.GetOperations()))
	for id, op := range r.GetOperations() {
		out[id] = OperationFromPB(op)
	}
	return out
}

// ListRequestToPB converts a filter and a page request to their wire form.
func ListRequestToPB(f ports.OpFilter, page ports.PageRequest) *ListOperationsRequest {
	st := make([]string, len(f.Statuses))
	for i, s := range f.Statuses {
		st[i] = string(s)
	}
	return &ListOperationsRequest{
		Kind:              string(f.Kind),
		Statuses:          st,
		Target:            f.Target,
		CreatedFromMicros: micros(f.CreatedFrom),
		CreatedToMicros:   micros(f.CreatedTo),
		Limit:             int32(min(max(page.Limit, math.MinInt32), math.MaxInt32)),
		After:             page.After,
	}
}

// ListRequestFromPB converts a wire ListOperationsRequest to a filter and a
// page request. More statuses than there are is refused (ErrInvalid): the
// core checks the rest.
func ListRequestFromPB(r *ListOperationsRequest) (ports.OpFilter, ports.PageRequest, error) {
	if n := len(r.GetStatuses()); n > len(ports.OpStatuses) {
		return ports.OpFilter{}, ports.PageRequest{}, fmt.Errorf("list operations: %d statuses, and there are only %d: %w",
			n, len(ports.OpStatuses), ports.ErrInvalid)
	}
	f := ports.OpFilter{
		Kind:        ports.OpKind(r.GetKind()),
		Target:      r.GetTarget(),
		CreatedFrom: fromMicros(r.GetCreatedFromMicros()),
		CreatedTo:   fromMicros(r.GetCreatedToMicros()),
	}
	for _, s := range r.GetStatuses() {
		f.Statuses = append(f.Statuses, ports.OpStatus(s))
	}
	return f, ports.PageRequest{Limit: int(r.GetLimit()), After: r.GetAfter()}, nil
}

// PageToPB converts a page of rows to its wire form.
func PageToPB(p ports.OpPage) *ListOperationsResponse {
	out := &ListOperationsResponse{Operations: make([]*Operation, len(p.Items)), Next: p.Next}
	for i, op := range p.Items {
		out.Operations[i] = OperationToPB(op)
	}
	return out
}

// PageFromPB converts a wire ListOperationsResponse to a page of rows.
func PageFromPB(r *ListOperationsResponse) ports.OpPage {
	out := ports.OpPage{Items: make([]ports.Operation, len(r.GetOperations())), Next: r.GetNext()}
	for i, op := range r.GetOperations() {
		out.Items[i] = OperationFromPB(op)
	}
	return out
}
