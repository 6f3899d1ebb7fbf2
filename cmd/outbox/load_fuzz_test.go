package main

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadConfig decodes configuration files as central's loader does —
// YAML bytes, checked against the settings' types, into a Config over the
// defaults, its own references made absolute, then validated — and checks
// that nothing panics and that a file the loader takes validates or names
// what is wrong.
func FuzzLoadConfig(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"", "---\n", "lists: [1, 2]\n", "outbox: {dispatch_interval: 0}\n", "secrets: {dirs: [/, '', ../..], env_prefix: OUTBOX_}\n",
		"a: &a [*a]\n", "x: &x {y: *x}\nstore: *x\n", "lists:\n  - {name: n, type: t, targets: ['file:/etc/passwd', 'env:OUTBOX_STORE_DSN']}\n",
		"channels:\n  - {type: email, settings: {password: hunter2, '': x}, retry: {interval: -1s}, rate_limit: .nan}\n",
		"link: {listen: '0.0.0.0:1', sites: [{id: a, token: 'file:x'}]}\nhttp: {admin: {password: 'file:../p'}}\n",
		"plugins: {external: [{type: x, sha256: zz}], socket_group: nosuch}\n", "data_dir: !!binary aGVsbG8=\n",
		"log: [\n", "{{{{", "\x00", "outbox:\n  max_batch: 99999999999999999999\n",
	} {
		f.Add([]byte(s))
	}
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		// The same bytes as central's configuration and as a site node's.
		fuzzLoad(t, centralSchema, data, base)
		fuzzLoad(t, siteSchema, data, base)
	})
}

// fuzzLoad reads data as a configuration file of schema sc, then resolves
// and validates it as the loader does; nothing may panic, and an error has
// a text.
func fuzzLoad[C any](t *testing.T, sc schema[C], data []byte, base string) {
	l := sc.New()
	if err := sc.ReadYAML(l, data, "fuzz.yaml"); err != nil {
		if err.Error() == "" {
			t.Fatal("an error without a text")
		}
		return
	}
	if sc.Resolve != nil {
		sc.Resolve(&l.Cfg, base)
	}
	for _, err := range sc.Check(l.Cfg) {
		if err.Error() == "" {
			t.Fatal("a validation error without a text")
		}
	}
}
