package httpapi

import (
	"fmt"
	"maps"
	"time"

	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

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

// wire is the Go types one operation reads and writes as JSON; nil for
// none.
type wire struct{ in, out any }

// wireTypes are, by operationId, the api package's types each operation of
// openapi.yaml decodes from its request body and writes as its 2xx body.
// An operation added to the document needs its row here.
var wireTypes = map[string]wire{
	"login": {api.Login{}, api.Me{}}, "logout": {}, "getMe": {nil, api.Me{}}, "getOpenAPI": {},
	"listNotifications": {nil, api.NotificationPage{}}, "countNotifications": {nil, api.Count{}},
	"getNotification": {nil, api.Detail{}}, "getKPIs": {nil, api.KPIReport{}}, "getThroughput": {nil, api.Throughput{}},
	"retryNotifications":    {api.ActionRequest{}, api.ActionResult{}},
	"discardNotifications":  {api.ActionRequest{}, api.ActionResult{}},
	"retryNotificationsNow": {api.ActionRequest{}, api.ActionResult{}},
	"parkNotifications":     {api.ActionRequest{}, api.ActionResult{}},
	"listLists":             {nil, []api.List{}}, "getList": {nil, api.List{}}, "putList": {api.List{}, api.List{}}, "deleteList": {},
	"listChannels": {nil, []api.Channel{}}, "getChannel": {nil, api.Channel{}},
	"putChannel": {api.Channel{}, api.Channel{}}, "deleteChannel": {},
	"listUsers": {nil, []api.User{}}, "putUser": {api.PutUser{}, api.User{}}, "deleteUser": {},
	"listTokens": {nil, []api.Token{}}, "createToken": {api.NewToken{}, api.CreatedToken{}}, "revokeToken": {},
	"createOwnToken": {api.NewOwnToken{}, api.CreatedToken{}}, "revokeOwnToken": {},
	"listAdminAudit": {nil, api.AdminPage{}},
	"listSiteCalls":  {nil, api.SiteCallPage{}}, "countSiteCalls": {nil, api.Count{}},
	"getSiteCallKPIs": {nil, []api.SiteCallKPI{}}, "getSiteCall": {nil, api.SiteCallDetail{}},
	"retrySiteCalls":   {api.SiteCallActionRequest{}, api.SiteCallActionResult{}},
	"discardSiteCalls": {api.SiteCallActionRequest{}, api.SiteCallActionResult{}},
	"listSites":        {nil, []api.Site{}}, "getSite": {nil, api.Site{}},
}

// TestOpenAPISchemasMatchTheWireTypes: the schema of every operation's
// request body and 2xx response, and the shared error response, match the
// Go types the handlers decode and write (wireTypes), both ways: each
// object's properties are exactly the struct's JSON fields, each property
// has the JSON type of its field (string, integer, number, boolean, array,
// object; a date-time for a time.Time), and in a response every property
// the schema requires is a field always written (no omitempty). (Not the
// converse: a schema such as List serves a request too, where the path
// gives the name.)
func TestOpenAPISchemasMatchTheWireTypes(t *testing.T) {
	raw, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := fmt.Sprintf("%s %s (%s)", method, path, op.OperationID)
			w, ok := wireTypes[op.OperationID]
			if !ok {
				t.Errorf("%s has no row in wireTypes (adapters/httpapi/openapi_internal_test.go): add\n\t%q: {in: api.<request body type or nil>, out: api.<2xx body type or nil>},",
					where, op.OperationID)
				continue
			}
			seen[op.OperationID] = true
			var in *openapi3.SchemaRef
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil {
					in = mt.Schema
				}
			}
			var out *openapi3.SchemaRef
			for code, resp := range op.Responses.Map() {
				if strings.HasPrefix(code, "2") && resp.Value != nil {
					if mt := resp.Value.Content.Get("application/json"); mt != nil {
						out = mt.Schema
					}
				}
			}
			for _, c := range []struct {
				what   string
				schema *openapi3.SchemaRef
				v      any
				resp   bool
			}{{"request body", in, w.in, false}, {"2xx response", out, w.out, true}} {
				switch {
				case c.schema == nil && c.v == nil:
				case c.schema == nil:
					t.Errorf("%s: the handler's %s is %T, the document has no application/json schema for it", where, c.what, c.v)
				case c.v == nil && op.OperationID == "getOpenAPI":
				case c.v == nil:
					t.Errorf("%s: the document has a %s schema, wireTypes has no Go type for it", where, c.what)
				default:
					for _, p := range schemaMismatches(where+" "+c.what, c.schema, reflect.TypeOf(c.v), c.resp) {
						t.Error(p)
					}
				}
			}
		}
	}
	for id := range wireTypes {
		if !seen[id] {
			t.Errorf("wireTypes has a row for %q, which no operation of openapi.yaml has: remove it or fix the operationId", id)
		}
	}
	errResp := doc.Components.Responses["Error"]
	if errResp == nil || errResp.Value.Content.Get("application/json") == nil {
		t.Fatal("openapi.yaml has no components.responses.Error with an application/json schema")
	}
	for _, p := range schemaMismatches("components.responses.Error", errResp.Value.Content.Get("application/json").Schema, reflect.TypeOf(api.ErrorBody{}), true) {
		t.Error(p)
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// schemaMismatches compares the schema ref at where with the Go type t and
// returns each difference, saying what to change. resp says t is written
// by the server (so a field with omitempty may be missing).
func schemaMismatches(where string, ref *openapi3.SchemaRef, t reflect.Type, resp bool) []string {
	if ref.Ref != "" {
		where += " (" + ref.Ref + ")"
	}
	s := ref.Value
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(format string, args ...any) []string {
		return []string{where + ": " + fmt.Sprintf(format, args...)}
	}
	typeIs := func(want string) []string {
		if got := schemaType(s); got != want {
			return bad("the Go type %s is written as a JSON %s; the schema says type %q", t, want, got)
		}
		return nil
	}
	switch {
	case t == timeType:
		if out := typeIs("string"); out != nil {
			return out
		}
		if s.Format != "date-time" {
			return bad("a time.Time needs format: date-time, not %q", s.Format)
		}
		return nil
	case t == rawType || t.Kind() == reflect.Interface:
		if got := schemaType(s); got != "" {
			return bad("%s holds any JSON; the schema says type %q (leave type out)", t, got)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		return typeIs("string")
	case reflect.Bool:
		return typeIs("boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return typeIs("integer")
	case reflect.Float32, reflect.Float64:
		return typeIs("number")
	case reflect.Slice, reflect.Array:
		if out := typeIs("array"); out != nil {
			return out
		}
		if s.Items == nil {
			return bad("an array needs items")
		}
		return schemaMismatches(where+"[]", s.Items, t.Elem(), resp)
	case reflect.Map:
		if out := typeIs("object"); out != nil {
			return out
		}
		if s.AdditionalProperties.Schema == nil {
			return bad("%s needs additionalProperties with the schema of its values", t)
		}
		return schemaMismatches(where+"{}", s.AdditionalProperties.Schema, t.Elem(), resp)
	case reflect.Struct:
		return structMismatches(where, s, t, resp)
	}
	return bad("the test does not know the Go kind %s", t.Kind())
}

// structMismatches compares an object schema (with its allOf parts) with
// struct type t field by field.
func structMismatches(where string, s *openapi3.Schema, t reflect.Type, resp bool) []string {
	props := map[string]*openapi3.SchemaRef{}
	required := map[string]bool{}
	var collect func(s *openapi3.Schema)
	collect = func(s *openapi3.Schema) {
		for k, v := range s.Properties {
			props[k] = v
		}
		for _, r := range s.Required {
			required[r] = true
		}
		for _, part := range s.AllOf {
			collect(part.Value)
		}
	}
	collect(s)
	var out []string
	if len(props) > 0 && schemaType(s) != "object" && len(s.AllOf) == 0 {
		out = append(out, fmt.Sprintf("%s: an object schema needs type: object", where))
	}
	fields := wireFields(t)
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		f := fields[name]
		p, ok := props[name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: %s has the JSON field %q (%s), the schema has no such property: add\n\t%s: {type: %s}",
				where, t, name, f.typ, name, jsonTypeOf(f.typ)))
			continue
		}
		if resp && f.omitempty && required[name] {
			out = append(out, fmt.Sprintf("%s: %s leaves %q out when empty (omitempty): drop it from the schema's required", where, t, name))
		}
		out = append(out, schemaMismatches(where+"."+name, p, f.typ, resp)...)
	}
	for _, name := range slices.Sorted(maps.Keys(props)) {
		if _, ok := fields[name]; !ok {
			out = append(out, fmt.Sprintf("%s: the schema has the property %q, %s has no such JSON field: remove it from the schema or add the field",
				where, name, t))
		}
	}
	return out
}

// wireField is one JSON field of a struct.
type wireField struct {
	typ       reflect.Type
	omitempty bool
}

// wireFields are the JSON fields of struct type t, with those of its
// embedded structs.
func wireFields(t reflect.Type) map[string]wireField {
	out := map[string]wireField{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			maps.Copy(out, wireFields(f.Type))
			continue
		}
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = wireField{typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}

// schemaType is the single JSON type a schema names, "" for none.
func schemaType(s *openapi3.Schema) string {
	if s.Type == nil || len(*s.Type) == 0 {
		if len(s.AllOf) > 0 {
			return "object"
		}
		return ""
	}
	return strings.Join(*s.Type, ",")
}

// jsonTypeOf is the JSON type Go type t is written as, for a hint.
func jsonTypeOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return "string, format: date-time"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Slice:
		return "array, items: {…}"
	}
	return "object"
}

// TestOpenAPIErrorCodes: the error codes the document lists are exactly
// those the server answers with.
func TestOpenAPIErrorCodes(t *testing.T) {
	raw, err := openAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	code := doc.Components.Schemas["ErrorBody"].Value.Properties["error"].Value.Properties["code"].Value
	var documented []string
	for _, v := range code.Enum {
		documented = append(documented, fmt.Sprint(v))
	}
	served := slices.Collect(maps.Keys(statusOf))
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("openapi.yaml's ErrorBody.error.code enum is %v; the server answers %v", documented, served)
	}
}

// TestOpenAPIHasNoEmptyKeys: no key of openapi.yaml is without a value. An
// unquoted comma in a flow mapping ({description: a, b}) makes the text
// after it such a key, cutting the description short and adding a field
// OpenAPI does not know; quote the value.
func TestOpenAPIHasNoEmptyKeys(t *testing.T) {
	raw, err := webFS.ReadFile("web/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if v.Tag == "!!null" {
					t.Errorf("openapi.yaml line %d: the key %q under %s has no value; quote the text before it if it holds a comma",
						k.Line, k.Value, path)
				}
				walk(v, path+"."+k.Value)
			}
		}
	}
	walk(&root, "")
}
