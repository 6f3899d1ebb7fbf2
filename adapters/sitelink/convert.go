package sitelink

import (
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
