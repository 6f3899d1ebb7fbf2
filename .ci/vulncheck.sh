#!/usr/bin/env bash
# Runs govulncheck over the whole module: it reports the known vulnerabilities
# of the Go standard library and of the modules the outbox requires, and which
# of them the code can reach. It exits non-zero when a reachable one is found.
#
#   bash .ci/vulncheck.sh                 # the public database, https://vuln.go.dev
#   OUTBOX_VULNDB=/path/to/osv bash .ci/vulncheck.sh
#
# Without internet access, point OUTBOX_VULNDB at a directory of the
# database's OSV files, such as the data/osv directory of a checkout of
# https://github.com/golang/vulndb (govulncheck reads a flat directory of
# OSV entries as well as a mirror of vuln.go.dev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

govulncheck=$(command -v govulncheck || true)
if [ -z "$govulncheck" ]; then
	go install golang.org/x/vuln/cmd/govulncheck@v1.9.0
	govulncheck="$(go env GOPATH)/bin/govulncheck"
fi

args=()
if [ -n "${OUTBOX_VULNDB:-}" ]; then
	args+=(-db "file://$(cd "$OUTBOX_VULNDB" && pwd)")
fi
exec "$govulncheck" "${args[@]}" ./...
