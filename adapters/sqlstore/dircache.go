package sqlstore

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// The directory's answers to List and ChannelSettings are kept for a short
// while (directoryFresh), so that the dispatcher's batches and ingest's
// batches, which each ask for their lists and channel types, do not each
// cost a statement: at the default batch of 100 those lookups were two of
// the three or four statements of a batch. A write through the same store
// (Put*, Delete*) drops every kept answer before it returns, so the node
// that made an edit reads it at once. An edit made elsewhere (another
// central node, the CLI in a process of its own, a DBA's UPDATE) reaches
// this node's reads at most directoryFresh later.

// directoryFresh is how long an answer of the database is reused.
const directoryFresh = time.Second

// directoryKept bounds the answers kept per kind: a site may name any list,
// so "not found" answers for names without a list must not pile up.
const directoryKept = 4096

// dirCache keeps the directory's recent answers. Its mutex guards the
// fields only; no query runs under it.
type dirCache struct {
	mu sync.Mutex
	// gen counts the writes through this store: an answer read while a
	// write ran is not kept (it may be the older one).
	gen      uint64
	lists    map[string]kept[ports.List]
	channels map[string]kept[ports.ChannelSettings]
	now      func() time.Time // time.Now; tests move it
}

// kept is one answer: the value, or found false for "not found", read at
// at.
type kept[T any] struct {
	val   T
	found bool
	at    time.Time
}

// clock returns the cache's time source.
func (c *dirCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// changed drops every kept answer: a write through this store ran (or
// may have run: it is called whatever the write's result).
func (c *dirCache) changed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.lists)
	clear(c.channels)
}

// cachedRead returns the answer kept in *m for key while it is fresh, or
// calls read, keeps its answer (a value, or found false) unless a write
// ran meanwhile, and returns it. Errors are never kept. copyOf copies a
// value, so that no caller shares the kept one.
func cachedRead[T any](c *dirCache, m *map[string]kept[T], key string, copyOf func(T) T,
	read func() (T, bool, error)) (T, bool, error) {
	c.mu.Lock()
	now := c.clock()
	if e, ok := (*m)[key]; ok && now.Sub(e.at) < directoryFresh && !now.Before(e.at) {
		c.mu.Unlock()
		return copyOf(e.val), e.found, nil
	}
	gen := c.gen
	c.mu.Unlock()

	v, found, err := read()
	if err != nil {
		return v, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return v, found, nil
	}
	if *m == nil {
		*m = make(map[string]kept[T])
	}
	if len(*m) >= directoryKept {
		maps.DeleteFunc(*m, func(_ string, e kept[T]) bool { return now.Sub(e.at) >= directoryFresh })
		if len(*m) >= directoryKept {
			clear(*m)
		}
	}
	(*m)[key] = kept[T]{val: copyOf(v), found: found, at: now}
	return v, found, nil
}

// copyList returns l with targets of its own.
func copyList(l ports.List) ports.List {
	l.Targets = slices.Clone(l.Targets)
	return l
}

// copyChannel returns c with settings of its own.
func copyChannel(c ports.ChannelSettings) ports.ChannelSettings {
	c.Settings = maps.Clone(c.Settings)
	return c
}
