package sitelink

import (
	"math"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/sitelink/internal/pb"
	"github.com/siteline/outbox/ports"
)

// This file converts between the plain Go types of ports.Central and their
// protobuf wire form, in both directions. Texts travel as bytes (see
// link.proto), times as Unix microseconds with 0 for the zero time.

func submissionToPB(s ports.Submission) *pb.Submission {
	return &pb.Submission{
		Id:                       []byte(s.ID),
		List:                     []byte(s.List),
		Subject:                  []byte(s.Subject),
		Body:                     []byte(s.Body),
		Type:                     []byte(s.Type),
		TypeData:                 s.TypeData,
		Priority:                 int64(s.Priority),
		ExpiresAtUnixMicros:      microsToPB(s.ExpiresAt),
		SourceSite:               []byte(s.SourceSite),
		SourceInstance:           []byte(s.SourceInstance),
		SourceScript:             []byte(s.SourceScript),
		ExecutionId:              []byte(s.ExecutionID),
		ParentExecutionId:        []byte(s.ParentExecutionID),
		SiteEnqueuedAtUnixMicros: microsToPB(s.SiteEnqueuedAt),
	}
}

func submissionFromPB(s *pb.Submission) ports.Submission {
	var typeData []byte
	if len(s.GetTypeData()) > 0 {
		typeData = s.GetTypeData()
	}
	return ports.Submission{
		ID:                string(s.GetId()),
		List:              string(s.GetList()),
		Subject:           string(s.GetSubject()),
		Body:              string(s.GetBody()),
		Type:              string(s.GetType()),
		TypeData:          typeData,
		Priority:          int(s.GetPriority()),
		ExpiresAt:         microsFromPB(s.GetExpiresAtUnixMicros()),
		SourceSite:        string(s.GetSourceSite()),
		SourceInstance:    string(s.GetSourceInstance()),
		SourceScript:      string(s.GetSourceScript()),
		ExecutionID:       string(s.GetExecutionId()),
		ParentExecutionID: string(s.GetParentExecutionId()),
		SiteEnqueuedAt:    microsFromPB(s.GetSiteEnqueuedAtUnixMicros()),
	}
}

func submitRequestToPB(req ports.SubmitRequest) *pb.SubmitRequest {
	out := &pb.SubmitRequest{Notifications: make([]*pb.Submission, len(req.Notifications))}
	for i, s := range req.Notifications {
		out.Notifications[i] = submissionToPB(s)
	}
	return out
}

func submitRequestFromPB(req *pb.SubmitRequest) []ports.Submission {
	subs := make([]ports.Submission, len(req.GetNotifications()))
	for i, s := range req.GetNotifications() {
		subs[i] = submissionFromPB(s)
	}
	return subs
}

func submitResultToPB(r ports.SubmitResult) *pb.SubmitResponse {
	out := &pb.SubmitResponse{Accepted: make([][]byte, len(r.Accepted))}
	for i, id := range r.Accepted {
		out.Accepted[i] = []byte(id)
	}
	for _, rej := range r.Rejected {
		// A reason may quote a malformed input; proto strings must be UTF-8.
		out.Rejected = append(out.Rejected, &pb.Rejection{Id: []byte(rej.ID),
			Reason: strings.ToValidUTF8(rej.Reason, "\uFFFD")})
	}
	return out
}

func submitResultFromPB(r *pb.SubmitResponse) ports.SubmitResult {
	var out ports.SubmitResult
	if n := len(r.GetAccepted()); n > 0 {
		out.Accepted = make([]string, n)
		for i, id := range r.GetAccepted() {
			out.Accepted[i] = string(id)
		}
	}
	for _, rej := range r.GetRejected() {
		out.Rejected = append(out.Rejected, ports.Rejection{ID: string(rej.GetId()), Reason: rej.GetReason()})
	}
	return out
}

// statusRequestFromPB is the Status request of site, the authenticated
// caller, for the ids of req.
func statusRequestFromPB(site string, req *pb.StatusRequest) ports.StatusRequest {
	ids := make([]string, len(req.GetIds()))
	for i, id := range req.GetIds() {
		ids[i] = string(id)
	}
	return ports.StatusRequest{Site: site, IDs: ids}
}

// statusResponseToPB answers each id of req, in its order; an id missing
// from got is Unknown.
func statusResponseToPB(req *pb.StatusRequest, got map[string]ports.Status) *pb.StatusResponse {
	out := &pb.StatusResponse{Statuses: make([]*pb.IDStatus, len(req.GetIds()))}
	for i, id := range req.GetIds() {
		st, ok := got[string(id)]
		if !ok {
			st = ports.StatusUnknown
		}
		// Proto strings must be UTF-8; statuses come from central's own set.
		out.Statuses[i] = &pb.IDStatus{Id: id, Status: strings.ToValidUTF8(string(st), "\uFFFD")}
	}
	return out
}

// microsToPB is t in Unix microseconds, 0 for the zero time.
func microsToPB(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// microsFromPB is the UTC time of us Unix microseconds, the zero time for 0.
func microsFromPB(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// opReportToPB is the wire form of a report; r.Site is not sent, nor any
// payload.
func opReportToPB(r ports.OpReport) *pb.ReportOperationsRequest {
	out := &pb.ReportOperationsRequest{Ops: make([]*pb.Operation, len(r.Ops))}
	for i, op := range r.Ops {
		out.Ops[i] = &pb.Operation{
			Id:                      []byte(op.ID),
			Kind:                    []byte(op.Kind),
			Target:                  []byte(op.Target),
			Method:                  []byte(op.Method),
			Status:                  []byte(op.Status),
			RetryCount:              int64(op.RetryCount),
			LastError:               []byte(op.LastError),
			NextAttemptAtUnixMicros: microsToPB(op.NextAttemptAt),
			SourceInstance:          []byte(op.SourceInstance),
			SourceScript:            []byte(op.SourceScript),
			ExecutionId:             []byte(op.ExecutionID),
			ParentExecutionId:       []byte(op.ParentExecutionID),
			CreatedAtUnixMicros:     microsToPB(op.CreatedAt),
			UpdatedAtUnixMicros:     microsToPB(op.UpdatedAt),
			TerminalAtUnixMicros:    microsToPB(op.TerminalAt),
			Version:                 op.Version,
		}
	}
	if f := r.Feed; f != nil {
		out.Feed = &pb.FeedPage{Epoch: []byte(f.Epoch), From: []byte(f.From), Next: []byte(f.Next), Last: f.Last}
	}
	return out
}

// opReportFromPB is the report of site, the authenticated caller. A retry
// count beyond int's range is clamped (central's validation judges it).
func opReportFromPB(site string, req *pb.ReportOperationsRequest) ports.OpReport {
	out := ports.OpReport{Site: site, Ops: make([]ports.Operation, len(req.GetOps()))}
	for i, op := range req.GetOps() {
		out.Ops[i] = ports.Operation{
			ID:                string(op.GetId()),
			Kind:              ports.OpKind(op.GetKind()),
			Target:            string(op.GetTarget()),
			Method:            string(op.GetMethod()),
			Status:            ports.OpStatus(op.GetStatus()),
			RetryCount:        int(min(max(op.GetRetryCount(), math.MinInt32), math.MaxInt32)),
			LastError:         string(op.GetLastError()),
			NextAttemptAt:     microsFromPB(op.GetNextAttemptAtUnixMicros()),
			SourceInstance:    string(op.GetSourceInstance()),
			SourceScript:      string(op.GetSourceScript()),
			ExecutionID:       string(op.GetExecutionId()),
			ParentExecutionID: string(op.GetParentExecutionId()),
			CreatedAt:         microsFromPB(op.GetCreatedAtUnixMicros()),
			UpdatedAt:         microsFromPB(op.GetUpdatedAtUnixMicros()),
			TerminalAt:        microsFromPB(op.GetTerminalAtUnixMicros()),
			Version:           op.GetVersion(),
		}
	}
	if f := req.GetFeed(); f != nil {
		out.Feed = &ports.FeedPage{Epoch: string(f.GetEpoch()), From: string(f.GetFrom()),
			Next: string(f.GetNext()), Last: f.GetLast()}
	}
	return out
}

// syncRequestToPB is the wire form of a Sync; the site is not sent (nor
// Health.Site), and the wait travels in milliseconds.
func syncRequestToPB(r ports.SyncRequest) *pb.SyncRequest {
	h := r.Health
	out := &pb.SyncRequest{
		Health: &pb.SiteHealth{
			Node:                         []byte(h.Node),
			Backlog:                      h.Backlog,
			OldestEnqueuedAtUnixMicros:   microsToPB(h.OldestEnqueuedAt),
			Replica:                      &pb.Replica{Node: []byte(h.Replica.Node), Role: []byte(h.Replica.Role), Term: h.Replica.Term, Leader: []byte(h.Replica.Leader)},
			LastCentralContactUnixMicros: microsToPB(h.LastCentralContact),
			LastCentralError:             []byte(h.LastCentralError),
		},
		Leads:      r.Leads,
		WaitMillis: r.Wait.Milliseconds(),
	}
	for _, k := range h.Operations {
		out.Health.Operations = append(out.Health.Operations, &pb.OpKindStats{Kind: []byte(k.Kind), Backlog: k.Backlog,
			Parked: k.Parked, OldestBufferedAtUnixMicros: microsToPB(k.OldestBufferedAt), Terminal: k.Terminal})
	}
	for _, a := range r.Answers {
		out.Answers = append(out.Answers, &pb.CommandAnswer{Id: []byte(a.ID), State: []byte(a.State), Result: []byte(a.Result)})
	}
	return out
}

// syncRequestFromPB is the Sync of site, the authenticated caller: the
// site and the health's site are the caller's, whatever the message says.
// The wait is not bounded here (the server caps it).
func syncRequestFromPB(site string, req *pb.SyncRequest) ports.SyncRequest {
	h, rep := req.GetHealth(), req.GetHealth().GetReplica()
	out := ports.SyncRequest{
		Site: site,
		Health: ports.SiteHealth{
			Site:             site,
			Node:             string(h.GetNode()),
			Backlog:          h.GetBacklog(),
			OldestEnqueuedAt: microsFromPB(h.GetOldestEnqueuedAtUnixMicros()),
			Replica: ports.ReplicaState{Node: string(rep.GetNode()), Role: ports.Role(rep.GetRole()),
				Term: rep.GetTerm(), Leader: string(rep.GetLeader())},
			LastCentralContact: microsFromPB(h.GetLastCentralContactUnixMicros()),
			LastCentralError:   string(h.GetLastCentralError()),
		},
		Leads: req.GetLeads(),
		Wait:  time.Duration(min(max(req.GetWaitMillis(), 0), math.MaxInt64/int64(time.Millisecond))) * time.Millisecond,
	}
	for _, k := range h.GetOperations() {
		out.Health.Operations = append(out.Health.Operations, ports.OpKindStats{Kind: ports.OpKind(k.GetKind()),
			Backlog: k.GetBacklog(), Parked: k.GetParked(),
			OldestBufferedAt: microsFromPB(k.GetOldestBufferedAtUnixMicros()), Terminal: k.GetTerminal()})
	}
	for _, a := range req.GetAnswers() {
		out.Answers = append(out.Answers, ports.CommandAnswer{ID: string(a.GetId()),
			State: ports.SiteCommandState(a.GetState()), Result: string(a.GetResult())})
	}
	return out
}

// syncAnswerToPB is the wire form of central's answer.
func syncAnswerToPB(a ports.SyncAnswer) *pb.SyncResponse {
	out := &pb.SyncResponse{}
	for _, c := range a.Commands {
		out.Commands = append(out.Commands, &pb.SiteCommand{Id: []byte(c.ID), Site: []byte(c.Site),
			OperationId: []byte(c.OperationID), Action: []byte(c.Action), Actor: []byte(c.Actor),
			RequestedAtUnixMicros: microsToPB(c.RequestedAt)})
	}
	if f := a.Feed; f != nil {
		out.Feed = &pb.SiteCursor{Epoch: []byte(f.Epoch), After: []byte(f.After)}
	}
	return out
}

// syncAnswerFromPB is central's answer; every command is Requested.
func syncAnswerFromPB(r *pb.SyncResponse) ports.SyncAnswer {
	var out ports.SyncAnswer
	for _, c := range r.GetCommands() {
		out.Commands = append(out.Commands, ports.SiteCommand{ID: string(c.GetId()), Site: string(c.GetSite()),
			OperationID: string(c.GetOperationId()), Action: ports.SiteCommandAction(c.GetAction()),
			Actor: string(c.GetActor()), RequestedAt: microsFromPB(c.GetRequestedAtUnixMicros()),
			State: ports.CommandRequested})
	}
	if f := r.GetFeed(); f != nil {
		out.Feed = &ports.SiteCursor{Epoch: string(f.GetEpoch()), After: string(f.GetAfter())}
	}
	return out
}
