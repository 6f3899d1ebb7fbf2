package httpapi

import (
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// retryingAPIRoutes registers the API's actions on Retrying notifications,
// the page's Retry now and Park: POST /notifications/retry-now makes the
// selected rows due at once, POST /notifications/park parks them. Both
// take an api.ActionRequest as retry and discard do (ids, or a filter
// whose statuses are Retrying, or all) and answer an api.ActionResult: the
// ids done, and each id refused with why.
func (s *Server) retryingAPIRoutes() {
	p := api.Prefix
	s.apiRoute("POST "+p+"/notifications/retry-now", ports.RoleOperator, s.apiAction(verbRetryNow))
	s.apiRoute("POST "+p+"/notifications/park", ports.RoleOperator, s.apiAction(verbPark))
}
