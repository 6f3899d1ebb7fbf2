package builtin

import (
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// Every built-in describes itself under the type it is registered with, so
// that central's settings check and the operator page agree with the
// registry.
func TestBuiltinsDescribeThemselvesUnderTheirType(t *testing.T) {
	for _, typ := range Types() {
		ch := Channels[typ](nil)
		d, ok := ch.(channel.Describer)
		if !ok {
			t.Errorf("%s: built-in channels must describe themselves", typ)
			continue
		}
		desc, err := d.Describe(t.Context())
		if err != nil || desc.Name != typ || desc.Version == "" {
			t.Errorf("%s: Describe = %+v, %v", typ, desc, err)
		}
	}
}
