// Package memdir is a [ports.DirectoryAdmin] in memory: the lists and channel
// settings of a configuration file, or of a test. It is the reference adapter
// of the directory contract (ports/directorytest); the SQL store keeps the
// same in its database.
package memdir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/siteline/outbox/ports"
)

var _ ports.DirectoryAdmin = (*Directory)(nil)

// Directory holds lists and channel settings in memory. It is safe for
// concurrent use; every value goes in and comes out as a copy.
type Directory struct {
	mu       sync.RWMutex
	lists    map[string]ports.List
	channels map[string]ports.ChannelSettings
}

// New checks lists and channels, as read from a configuration, and builds a
// Directory holding them. It refuses, with one *ports.FieldError per broken
// rule (joined with errors.Join, each wrapping ports.ErrInvalid), every rule
// of ports.List.Validate and ports.ChannelSettings.Validate, and two lists
// with the same name or two channels with the same type. Fields are paths
// into the input, such as lists[1].type or channels[0].retry.backoff
// (indexes start at 0), so that a caller reading a configuration file can
// point at the setting.
//
// A list whose type has no channel settings is accepted: the core then uses
// the default retry policy and empty settings.
func New(lists []ports.List, channels []ports.ChannelSettings) (*Directory, error) {
	d := &Directory{
		lists:    make(map[string]ports.List, len(lists)),
		channels: make(map[string]ports.ChannelSettings, len(channels)),
	}
	var errs []error
	firstList := map[string]int{}
	for i, l := range lists {
		at := fmt.Sprintf("lists[%d]", i)
		errs = appendEntry(errs, firstList, "lists", i, "name", l.Name, "list name", ports.PrefixFields(at, l.Validate()))
		if _, dup := d.lists[l.Name]; !dup {
			d.lists[l.Name] = copyList(l)
		}
	}
	firstChannel := map[string]int{}
	for i, c := range channels {
		at := fmt.Sprintf("channels[%d]", i)
		errs = appendEntry(errs, firstChannel, "channels", i, "type", c.Type, "channel type", ports.PrefixFields(at, c.Validate()))
		if _, dup := d.channels[c.Type]; !dup {
			d.channels[c.Type] = copyChannel(c)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

// appendEntry appends to errs the broken rules of entry i of a section (a
// list, a channel): first, when its key (the name, the type) is valid but
// repeats an earlier entry's, whose index first remembers, an error saying
// so; then invalid, the entry's own broken rules (from Validate).
func appendEntry(errs []error, first map[string]int, section string, i int, field, key, what string, invalid error) []error {
	var own []error
	if j, ok := invalid.(interface{ Unwrap() []error }); ok {
		own = j.Unwrap()
	} else if invalid != nil {
		own = []error{invalid}
	}
	keyField := fmt.Sprintf("%s[%d].%s", section, i, field)
	keyBroken := slices.ContainsFunc(own, func(e error) bool {
		var fe *ports.FieldError
		return errors.As(e, &fe) && fe.Field == keyField
	})
	if !keyBroken {
		if j, dup := first[key]; dup {
			errs = append(errs, &ports.FieldError{
				Field: keyField,
				Msg:   fmt.Sprintf("duplicate %s %q (also %s[%d])", what, key, section, j),
			})
		} else {
			first[key] = i
		}
	}
	return append(errs, own...)
}

// List implements ports.Directory.
func (d *Directory) List(_ context.Context, name string) (ports.List, error) {
	d.mu.RLock()
	l, ok := d.lists[name]
	d.mu.RUnlock()
	if !ok {
		return ports.List{}, fmt.Errorf("memdir: list %q: %w", name, ports.ErrNotFound)
	}
	return copyList(l), nil
}

// ChannelSettings implements ports.Directory.
func (d *Directory) ChannelSettings(_ context.Context, typ string) (ports.ChannelSettings, error) {
	d.mu.RLock()
	c, ok := d.channels[typ]
	d.mu.RUnlock()
	if !ok {
		return ports.ChannelSettings{}, fmt.Errorf("memdir: channel settings for type %q: %w", typ, ports.ErrNotFound)
	}
	return copyChannel(c), nil
}

// PutList implements ports.DirectoryAdmin.
func (d *Directory) PutList(_ context.Context, l ports.List) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("memdir: put list %q: %w", l.Name, err)
	}
	l = copyList(l)
	d.mu.Lock()
	d.lists[l.Name] = l
	d.mu.Unlock()
	return nil
}

// DeleteList implements ports.DirectoryAdmin.
func (d *Directory) DeleteList(_ context.Context, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.lists[name]; !ok {
		return fmt.Errorf("memdir: delete list %q: %w", name, ports.ErrNotFound)
	}
	delete(d.lists, name)
	return nil
}

// Lists implements ports.DirectoryAdmin.
func (d *Directory) Lists(context.Context) ([]ports.List, error) {
	d.mu.RLock()
	out := make([]ports.List, 0, len(d.lists))
	for _, l := range d.lists {
		out = append(out, copyList(l))
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b ports.List) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// PutChannel implements ports.DirectoryAdmin.
func (d *Directory) PutChannel(_ context.Context, c ports.ChannelSettings) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("memdir: put channel %q: %w", c.Type, err)
	}
	c = copyChannel(c)
	d.mu.Lock()
	d.channels[c.Type] = c
	d.mu.Unlock()
	return nil
}

// DeleteChannel implements ports.DirectoryAdmin.
func (d *Directory) DeleteChannel(_ context.Context, typ string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.channels[typ]; !ok {
		return fmt.Errorf("memdir: delete channel settings for type %q: %w", typ, ports.ErrNotFound)
	}
	delete(d.channels, typ)
	return nil
}

// Channels implements ports.DirectoryAdmin.
func (d *Directory) Channels(context.Context) ([]ports.ChannelSettings, error) {
	d.mu.RLock()
	out := make([]ports.ChannelSettings, 0, len(d.channels))
	for _, c := range d.channels {
		out = append(out, copyChannel(c))
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b ports.ChannelSettings) int { return cmp.Compare(a.Type, b.Type) })
	return out, nil
}

func copyList(l ports.List) ports.List {
	l.Targets = slices.Clone(l.Targets)
	return l
}

func copyChannel(c ports.ChannelSettings) ports.ChannelSettings {
	c.Settings = maps.Clone(c.Settings)
	return c
}
