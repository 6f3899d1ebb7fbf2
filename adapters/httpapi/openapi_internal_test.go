package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// TestOpenAPIDescribesEveryRoute: every API route the server registers is
// in the OpenAPI document with its method, and the document names no route
// the server lacks.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	store := memstore.New()
	dir, _ := memdir.New(nil, nil)
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir,
		Clock: ports.SystemClock{}, Channels: ports.ChannelMap{}})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{BcryptCost: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	editor, err := core.NewDirectoryEditor(dir, store, ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{"POST /login": true, "POST /logout": true, "GET /openapi.json": true}
	for _, p := range s.apiPatterns {
		method, path, _ := strings.Cut(p, " ")
		served[method+" "+strings.TrimPrefix(path, api.Prefix)] = true
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "parameters" {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("%s is served but not in openapi.yaml", r)
		}
	}
	for r := range documented {
		if !served[r] {
			t.Errorf("%s is in openapi.yaml but not served", r)
		}
	}
}
