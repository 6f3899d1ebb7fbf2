package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"gopkg.in/yaml.v3"
)

// openAPIJSON is the OpenAPI document (web/openapi.yaml), converted to JSON
// once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	raw, err := webFS.ReadFile("web/openapi.yaml")
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("httpapi: openapi.yaml: %w", err)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("httpapi: openapi.yaml as JSON: %w", err)
	}
	return out, nil
})

// openAPI serves the OpenAPI document.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	doc, err := openAPIJSON()
	if err != nil {
		s.apiError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(doc)
}
