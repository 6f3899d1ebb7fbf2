package httpapi

import (
	"encoding/json"
	"reflect"
	"slices"
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
		Clock: ports.SystemClock{}, Channels: ports.ChannelMap{}, SiteCalls: store})
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
	s, err := New(Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, SiteCalls: svc})
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

// TestOpenAPISchemasMatchTheWireTypes: the document's schemas of a
// notification, its detail, its targets and its history, and of a site
// call, its detail, its actions and a site, name exactly the JSON fields
// the server writes (the api package's types).
func TestOpenAPISchemasMatchTheWireTypes(t *testing.T) {
	raw, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]openAPISchema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"Notification": api.Notification{}, "NotificationPage": api.NotificationPage{}, "Detail": api.Detail{},
		"TargetState": api.TargetState{}, "AuditRecord": api.AuditRecord{}, "AuditTarget": api.AuditTarget{},
		"SiteCall": api.SiteCall{}, "SiteCallPage": api.SiteCallPage{}, "SiteCallDetail": api.SiteCallDetail{},
		"SiteCommand": api.SiteCommand{}, "SiteCallFilter": api.SiteCallFilter{}, "SiteCallKey": api.SiteCallKey{},
		"SiteCallActionRequest": api.SiteCallActionRequest{}, "SiteCallActionResult": api.SiteCallActionResult{},
		"SiteCallKPI": api.SiteCallKPI{}, "Site": api.Site{}, "SiteNode": api.SiteNode{}, "SiteNodeOps": api.SiteNodeOps{},
	} {
		documented := doc.Components.Schemas[name].fields(doc.Components.Schemas)
		served := jsonFields(reflect.TypeOf(v))
		slices.Sort(documented)
		slices.Sort(served)
		if !slices.Equal(documented, served) {
			t.Errorf("schema %s names %v; %T writes %v", name, documented, v, served)
		}
	}
}

// openAPISchema is the part of a schema object the test reads.
type openAPISchema struct {
	Properties map[string]any `json:"properties"`
	AllOf      []struct {
		Ref string `json:"$ref"`
		openAPISchema
	} `json:"allOf"`
}

// fields are the property names of s, with those of the schemas its allOf
// refers to.
func (s openAPISchema) fields(all map[string]openAPISchema) []string {
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	for _, part := range s.AllOf {
		if ref, ok := strings.CutPrefix(part.Ref, "#/components/schemas/"); ok {
			out = append(out, all[ref].fields(all)...)
		}
		out = append(out, part.openAPISchema.fields(all)...)
	}
	return out
}

// jsonFields are the JSON field names of struct type t, with those of its
// embedded structs.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
