// Package builtin is the registry of the channels built into the outbox
// binary. Built-in channels still run as plugin processes, started as
// `outbox plugin serve <type>` from the outbox binary itself, so a crash in
// one never takes central down and they pass through the same boundary as a
// third-party plugin.
package builtin

import (
	"log/slog"
	"maps"
	"slices"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/email"
	"github.com/siteline/outbox/plugins/slack"
	"github.com/siteline/outbox/plugins/teams"
	"github.com/siteline/outbox/plugins/webhook"
)

// Channels builds each built-in channel, by type. It is one map literal, so
// the compiler refuses two channels of one type; central refuses a
// third-party plugin that takes a built-in's type.
var Channels = map[string]func(*slog.Logger) channel.Channel{
	"email":   func(l *slog.Logger) channel.Channel { return email.New(l) },
	"webhook": func(l *slog.Logger) channel.Channel { return webhook.New(l) },
	"slack":   func(l *slog.Logger) channel.Channel { return slack.New(l) },
	"teams":   func(l *slog.Logger) channel.Channel { return teams.New(l) },
}

// Types returns the built-in channel types, sorted.
func Types() []string { return slices.Sorted(maps.Keys(Channels)) }
