package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// throughputRoutes registers GET /api/v1/throughput (viewer). The page's
// charts are on the dashboard (charts.go).
func (s *Server) throughputRoutes() {
	s.apiRoute("GET "+api.Prefix+"/throughput", ports.RoleViewer, s.apiThroughput)
}

// throughput reads the query parameters v (api.ParseThroughput) and counts.
func (s *Server) throughput(ctx context.Context, v url.Values) (ports.ThroughputQuery, ports.Throughput, error) {
	q, err := api.ParseThroughput(v, s.cfg.Clock.Now())
	if err != nil {
		return q, ports.Throughput{}, invalid(err)
	}
	t, err := s.cfg.Outbox.Throughput(ctx, q)
	return q, t, err
}

func (s *Server) apiThroughput(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, t, err := s.throughput(r.Context(), r.URL.Query())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromThroughput(t, q.By))
}
