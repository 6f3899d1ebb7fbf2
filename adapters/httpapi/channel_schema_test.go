package httpapi_test

import (
	"reflect"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/plugins/channel/v1"
)

// TestChannelSchemaOf: each setting a plugin describes becomes one input
// of the channel form, in order, every field carried, its allowed values
// a copy.
func TestChannelSchemaOf(t *testing.T) {
	in := []channel.Setting{
		{Name: "host", Description: "The host.", Required: true},
		{Name: "password", Secret: true},
		{Name: "tls", Default: "starttls", Allowed: []string{"none", "starttls"}},
		{Name: "port", Kind: channel.KindNumber},
		{Name: "scopes", Kind: channel.KindList},
	}
	want := []httpapi.ChannelSetting{
		{Name: "host", Description: "The host.", Required: true},
		{Name: "password", Secret: true},
		{Name: "tls", Default: "starttls", Allowed: []string{"none", "starttls"}},
		{Name: "port", Kind: "number"},
		{Name: "scopes", Kind: "list"},
	}
	got := httpapi.ChannelSchemaOf(in)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ChannelSchemaOf =\n%+v\nwant\n%+v", got, want)
	}
	got[2].Allowed[0] = "changed"
	if in[2].Allowed[0] != "none" {
		t.Error("the schema shares its allowed values with the description")
	}
	if got := httpapi.ChannelSchemaOf(nil); len(got) != 0 {
		t.Errorf("ChannelSchemaOf(nil) = %+v", got)
	}
	// Every field of channel.Setting is carried: a new one must be added
	// to ChannelSetting and here.
	if n, m := reflect.TypeFor[channel.Setting]().NumField(), reflect.TypeFor[httpapi.ChannelSetting]().NumField(); n != m {
		t.Errorf("channel.Setting has %d fields, httpapi.ChannelSetting %d", n, m)
	}
}
