package httpapi

import (
	"net/http"
	"time"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// This file encodes the operations of ops_sitecalls.go as the JSON API.

// siteCallAPIRoutes registers the API routes of the sites' cached calls
// and health (Config.SiteCalls is set).
func (s *Server) siteCallAPIRoutes() {
	p := api.Prefix
	s.apiRoute("GET "+p+"/site-calls", ports.RoleViewer, s.apiSiteCalls)
	s.apiRoute("GET "+p+"/site-calls/count", ports.RoleViewer, s.apiSiteCallCount)
	s.apiRoute("GET "+p+"/site-calls/kpis", ports.RoleViewer, s.apiSiteCallKPIs)
	s.apiRoute("GET "+p+"/site-calls/{site}/{id}", ports.RoleViewer, s.apiSiteCall)
	s.apiRoute("POST "+p+"/site-calls/retry", ports.RoleOperator, s.apiSiteCallAction(verbRetry))
	s.apiRoute("POST "+p+"/site-calls/discard", ports.RoleOperator, s.apiSiteCallAction(verbDiscard))
	s.apiRoute("GET "+p+"/sites", ports.RoleViewer, s.apiSites)
	s.apiRoute("GET "+p+"/sites/{site}", ports.RoleViewer, s.apiSite)
}

func (s *Server) apiSiteCalls(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, err := parseSiteCallQuery(r.URL.Query())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	page, err := s.siteCalls(r.Context(), q)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromSiteCallPage(page))
}

func (s *Server) apiSiteCallCount(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	q, err := parseSiteCallQuery(r.URL.Query())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	at := api.TimePtr(time.Now())
	n, err := s.siteCallCount(r.Context(), q.Filter)
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Count{Count: n, At: at})
}

func (s *Server) apiSiteCallKPIs(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	ks, err := s.siteCallKPIs(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.SiteCallKPI, len(ks))
	for i, k := range ks {
		out[i] = api.FromSiteCallKPI(k)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiSiteCall(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	d, err := s.siteCall(r.Context(), r.PathValue("site"), r.PathValue("id"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromSiteCallDetail(d))
}

func (s *Server) apiSiteCallAction(v verb) handler {
	return func(w http.ResponseWriter, r *http.Request, p ports.Principal) {
		var in api.SiteCallActionRequest
		if err := decodeJSON(w, r, &in); err != nil {
			s.apiError(w, r, err)
			return
		}
		res, err := s.actSiteCalls(r.Context(), p, v, in)
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, api.FromSiteCallActionResult(res))
	}
}

func (s *Server) apiSites(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	vs, err := s.sites(r.Context())
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	out := make([]api.Site, len(vs))
	for i, v := range vs {
		out[i] = api.FromSiteView(v)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiSite(w http.ResponseWriter, r *http.Request, _ ports.Principal) {
	v, err := s.siteView(r.Context(), r.PathValue("site"))
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FromSiteView(v))
}
