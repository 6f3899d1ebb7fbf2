package httpapi

// siteCallAPIRoutes registers the API routes of the sites' cached calls
// and health (Config.SiteCalls is set).
func (s *Server) siteCallAPIRoutes() {
}
