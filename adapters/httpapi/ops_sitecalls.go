package httpapi

import (
	"context"
	"fmt"
	"net/url"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/httpapi/human"
	"github.com/siteline/outbox/ports"
)

// The operations on central's mirror of the sites' cached calls and on the
// sites' health that the page and the API share (see ops.go). They need
// Config.SiteCalls; without it their routes are not registered.

// siteCallQuery is a parsed request for a page of mirror rows.
type siteCallQuery struct {
	Filter api.SiteCallFilter
	Limit  int
	After  string
}

// parseSiteCallQuery reads the filter and the paging of a list request.
func parseSiteCallQuery(v url.Values) (siteCallQuery, error) {
	f, err := api.ParseSiteCallFilter(v)
	if err != nil {
		return siteCallQuery{}, invalid(err)
	}
	limit, after, err := api.ParsePage(v)
	if err != nil {
		return siteCallQuery{}, invalid(err)
	}
	return siteCallQuery{Filter: f, Limit: limit, After: after}, nil
}

// siteCalls is one page of mirror rows matching q.
func (s *Server) siteCalls(ctx context.Context, q siteCallQuery) (ports.SiteCallPage, error) {
	return s.cfg.SiteCalls.QuerySiteCalls(ctx, q.Filter.PortsFilter(), ports.PageRequest{Limit: q.Limit, After: q.After})
}

// siteCallCount is how many mirror rows match f.
func (s *Server) siteCallCount(ctx context.Context, f api.SiteCallFilter) (int64, error) {
	return s.cfg.SiteCalls.CountSiteCalls(ctx, f.PortsFilter())
}

// siteCall is one mirror row with the commands relayed for it.
func (s *Server) siteCall(ctx context.Context, site, id string) (ports.SiteCallDetail, error) {
	return s.cfg.SiteCalls.SiteCall(ctx, site, id)
}

// siteCallKPIs are the mirror's counts per site.
func (s *Server) siteCallKPIs(ctx context.Context) ([]ports.SiteCallKPI, error) {
	return s.cfg.SiteCalls.SiteCallKPIs(ctx)
}

// sites is every site that ever reported, with its state and nodes.
func (s *Server) sites(ctx context.Context) ([]ports.SiteView, error) {
	return s.cfg.SiteCalls.Sites(ctx)
}

// siteView is one site with its state and nodes; a site that never
// reported is ErrNotFound.
func (s *Server) siteView(ctx context.Context, site string) (ports.SiteView, error) {
	vs, err := s.sites(ctx)
	if err != nil {
		return ports.SiteView{}, err
	}
	for _, v := range vs {
		if v.Site == site {
			return v, nil
		}
	}
	return ports.SiteView{}, fmt.Errorf("site %.64q never reported to central: %w", site, ports.ErrNotFound)
}

// actSiteCalls relays a Retry or Discard of the Parked rows req selects to
// their sites, recording p as the actor.
func (s *Server) actSiteCalls(ctx context.Context, p ports.Principal, v verb, req api.SiteCallActionRequest) (ports.SiteCallActionResult, error) {
	if len(req.Keys) > 0 && (req.All || req.Filter != nil && !req.Filter.IsZero()) {
		return ports.SiteCallActionResult{}, fmt.Errorf("give keys, a filter or all, not more than one: %w", ports.ErrInvalid)
	}
	a := ports.SiteCallAction{All: req.All, Actor: p.Name}
	for _, k := range req.Keys {
		a.Keys = append(a.Keys, ports.SiteCallKey(k))
	}
	if req.Filter != nil {
		a.Filter = req.Filter.PortsFilter()
	}
	if v == verbRetry {
		return s.cfg.SiteCalls.RetrySiteCalls(ctx, a)
	}
	return s.cfg.SiteCalls.DiscardSiteCalls(ctx, a)
}

// siteCallActionMessage is the one-line summary of a relayed action.
func siteCallActionMessage(v verb, res ports.SiteCallActionResult) string {
	msg := fmt.Sprintf("%s requested for %d cached call(s); each changes when its site reports", verbTitle(v), len(res.Requested))
	if n := len(res.Refused); n > 0 {
		// Clipped: a flash over the cookie's bound would be dropped.
		msg += fmt.Sprintf("; %d refused: %s", n, human.Clip(res.Refused[0].Reason, 160))
		if n > 1 {
			msg += fmt.Sprintf(" (and %d more)", n-1)
		}
	}
	return msg + "."
}

// verbTitle is the verb as a command's name: Retry, Discard.
func verbTitle(v verb) string {
	if v == verbRetry {
		return string(ports.SiteRetry)
	}
	return string(ports.SiteDiscard)
}
