package httpapi

import (
	"slices"

	"github.com/siteline/outbox/plugins/channel/v1"
)

// ChannelSchemaOf is the channel form's schema (Config.ChannelSchema) for
// the settings a channel plugin describes (channel.Description.Settings),
// in their order.
func ChannelSchemaOf(settings []channel.Setting) []ChannelSetting {
	out := make([]ChannelSetting, len(settings))
	for i, st := range settings {
		out[i] = ChannelSetting{Name: st.Name, Description: st.Description, Required: st.Required, Secret: st.Secret,
			Default: st.Default, Allowed: slices.Clone(st.Allowed), Kind: string(st.Kind)}
	}
	return out
}
