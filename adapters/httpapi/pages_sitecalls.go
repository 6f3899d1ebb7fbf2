package httpapi

// siteCallPageRoutes registers the page's "Site calls" and "Sites" views
// (Config.SiteCalls is set).
func (s *Server) siteCallPageRoutes() {
}
