package httpapi

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/ports"
)

// This file holds the admin operations both entrances call: the page's
// forms (admin_pages.go) and the JSON API (api.go). Each names its caller
// as the actor, so that the directory editor and the operator accounts
// service write the admin audit row the same way for both.

// ChannelSetting describes one setting of a channel type as the plugin
// delivering the type describes it (channel.Setting): the page's channel
// form has one input per setting.
type ChannelSetting struct {
	Name        string
	Description string
	// Required settings must be present and not blank.
	Required bool
	// Secret settings are stored as references only (env:NAME,
	// file:/path).
	Secret bool
	// Default is the value used when the setting is absent, for people.
	Default string
	// Allowed, when not empty, lists the only values accepted.
	Allowed []string
	// Kind is the type of the value: "" (text), "number", "bool",
	// "duration" or "list" (comma-separated).
	Kind string
}

// lists is every list as p may see it.
func (s *Server) lists(ctx context.Context, p ports.Principal) ([]ports.List, error) {
	ls, err := s.cfg.Directory.Lists(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ls {
		ls[i] = shownList(p, ls[i])
	}
	return ls, nil
}

// deleteList deletes the named list, recording p as the actor.
func (s *Server) deleteList(ctx context.Context, p ports.Principal, name string) error {
	return s.cfg.Editor.DeleteList(ctx, p.Name, name)
}

// channels is every channel settings row as p may see it.
func (s *Server) channels(ctx context.Context, p ports.Principal) ([]ports.ChannelSettings, error) {
	cs, err := s.cfg.Directory.Channels(ctx)
	if err != nil {
		return nil, err
	}
	for i, c := range cs {
		cs[i] = shownChannel(p, c)
	}
	return cs, nil
}

// deleteChannel deletes the settings of typ, recording p as the actor.
func (s *Server) deleteChannel(ctx context.Context, p ports.Principal, typ string) error {
	return s.cfg.Editor.DeleteChannel(ctx, p.Name, typ)
}

// putUser creates the account name or changes its role and password,
// recording p as the actor.
func (s *Server) putUser(ctx context.Context, p ports.Principal, name string, in api.PutUser) (ports.User, error) {
	return s.cfg.Operators.PutUser(ctx, ports.UserRequest{Actor: p.Name, Name: name, Role: in.Role, Password: in.Password})
}

// deleteUser deletes the account name, recording p as the actor.
func (s *Server) deleteUser(ctx context.Context, p ports.Principal, name string) error {
	return s.cfg.Operators.DeleteUser(ctx, p.Name, name)
}

// createToken makes an API token, recording p as the actor; the secret is
// the only copy.
func (s *Server) createToken(ctx context.Context, p ports.Principal, in api.NewToken) (string, ports.Token, error) {
	return s.cfg.Operators.CreateToken(ctx, tokenRequest(p, in))
}

// deleteToken revokes the token id, recording p as the actor.
func (s *Server) deleteToken(ctx context.Context, p ports.Principal, id string) error {
	return s.cfg.Operators.DeleteToken(ctx, p.Name, id)
}

// channelType is one channel type in use: delivered by a loaded plugin,
// named by a list, or holding a settings row.
type channelType struct {
	Type string
	// Plugin is the plugin delivering the type; nil when none is loaded.
	Plugin *ports.PluginStatus
	// Lists are the lists of this type.
	Lists []string
	// Settings is the type's settings row, as p may see it; nil when it
	// has none and delivers with the defaults.
	Settings *ports.ChannelSettings
}

// channelTypes is every channel type in use, sorted: the loaded plugins'
// types, the types lists name and the types with a settings row.
func (s *Server) channelTypes(ctx context.Context, p ports.Principal) ([]channelType, error) {
	cs, err := s.channels(ctx, p)
	if err != nil {
		return nil, err
	}
	ls, err := s.cfg.Directory.Lists(ctx)
	if err != nil {
		return nil, err
	}
	byType := map[string]*channelType{}
	get := func(typ string) *channelType {
		if byType[typ] == nil {
			byType[typ] = &channelType{Type: typ}
		}
		return byType[typ]
	}
	if s.cfg.Plugins != nil {
		for _, ps := range s.cfg.Plugins() {
			get(ps.Type).Plugin = &ps
		}
	}
	for _, l := range ls {
		t := get(l.Type)
		t.Lists = append(t.Lists, l.Name)
	}
	for i := range cs {
		get(cs[i].Type).Settings = &cs[i]
	}
	out := make([]channelType, 0, len(byType))
	for _, t := range byType {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b channelType) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}

// channelSchema is the settings schema of typ's plugin; ok is false when
// no schema is known (no plugin delivers typ, or it describes none).
func (s *Server) channelSchema(typ string) (schema []ChannelSetting, ok bool) {
	if s.cfg.ChannelSchema == nil {
		return nil, false
	}
	schema, ok = s.cfg.ChannelSchema(typ)
	return schema, ok && len(schema) > 0
}

// channelSettings is the settings row of typ as p may see it, or a row of
// defaults when typ has none.
func (s *Server) channelSettings(ctx context.Context, p ports.Principal, typ string) (ports.ChannelSettings, error) {
	c, err := s.cfg.Directory.ChannelSettings(ctx, typ)
	if errors.Is(err, ports.ErrNotFound) {
		return ports.ChannelSettings{Type: typ, Settings: map[string]string{}}, nil
	}
	if err != nil {
		return ports.ChannelSettings{}, err
	}
	return shownChannel(p, c), nil
}
