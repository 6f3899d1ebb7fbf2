#!/usr/bin/env bash
# The one command that sets up a fresh Debian machine and runs the whole test
# suite: the source checks (gofmt, go mod tidy, go vet, staticcheck), then go
# test with the race detector. Extra arguments are passed to go test, e.g.
# `bash .ci/test.sh -run TestCentral ./cmd/...` (package patterns given there
# are added to ./...).
#
# The source checks fail the run when a file is not gofmt-formatted, when
# go.mod or go.sum differ from what `go mod tidy` makes of them (the diff is
# printed), or when go vet or staticcheck report anything. staticcheck is
# installed with go install at the version pinned below (through the Go module
# proxy, the only network access CI has besides Debian's packages).
#
# PostgreSQL: when OUTBOX_TEST_POSTGRES_DSN is set, the tests use that server.
# Otherwise this script starts a throwaway cluster (initdb in a temporary
# directory, trust authentication, listening on 127.0.0.1 on a free port,
# its unix socket in the same directory), exports OUTBOX_TEST_POSTGRES_DSN,
# and stops and removes it on exit. The PostgreSQL server binaries are
# installed from Debian's packages when none are found. A test that must
# restart its server under load (cmd/outbox, TestCentralsSurviveDatabaseRestart)
# starts one of its own with initdb and pg_ctl from OUTBOX_TEST_PG_BINDIR
# (exported here; unset, it looks on PATH and in /usr/lib/postgresql).
#
# systemd-analyze: the check of the systemd units (configs/systemd) needs it;
# as root, Debian's systemd is installed when it is missing.
#
# Chromium: the browser test of the operator page needs a chromium,
# chromium-browser or google-chrome on PATH. As root, Debian's chromium is
# installed when none is found; otherwise that test skips and says so.
#
# It runs as root (CI) or as a normal user (a developer with PostgreSQL
# installed); as root the cluster runs as the unprivileged user postgres,
# created when missing, because PostgreSQL refuses to run as root.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '.ci/test.sh: %s\n' "$*" >&2; }

is_root() { [ "$(id -u)" -eq 0 ]; }

apt_updated=""
apt_install() {
	if ! is_root; then
		log "missing $*; install it (apt-get install $*) or run as root"
		exit 1
	fi
	if [ -z "$apt_updated" ]; then
		apt-get update
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

command -v go >/dev/null || {
	log "the go tool is not on PATH"
	exit 1
}

# The race detector needs cgo and a C toolchain.
if ! command -v gcc >/dev/null; then
	apt_install gcc libc6-dev
fi
export CGO_ENABLED=1

# The browser test of the operator page (acceptance, TestOperatorPageInChromium)
# drives Chromium; it finds the binary on PATH and skips without one.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
	if is_root; then
		log "no chromium found; installing chromium for the browser test"
		apt_install chromium
	else
		log "no chromium found: the browser test of the operator page will skip (apt-get install chromium)"
	fi
fi

# The systemd units in configs/systemd are checked with systemd-analyze
# verify and security (cmd/outbox, TestSystemdUnitsVerify), which work on the
# unit files without a running systemd; under CI=true the test fails without
# the tool, elsewhere it skips.
if ! command -v systemd-analyze >/dev/null; then
	if is_root; then
		log "no systemd-analyze found; installing systemd for the check of the units"
		apt_install systemd
	else
		log "no systemd-analyze found: the check of the systemd units will skip (apt-get install systemd)"
	fi
fi

# pg_bindir prints a directory holding both initdb and pg_ctl, if any: the
# one on PATH first, then the newest /usr/lib/postgresql/*/bin.
pg_bindir() {
	local d
	if d="$(command -v initdb 2>/dev/null)" && [ -x "$(dirname "$d")/pg_ctl" ]; then
		dirname "$d"
		return 0
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# port_free succeeds when nothing listens on 127.0.0.1:$1.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pg_tmp=""
pg_as=()
pg_bin=""

stop_postgres() {
	if [ -n "$pg_tmp" ]; then
		if [ -f "$pg_tmp/data/postmaster.pid" ]; then
			"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_tmp/data" -m immediate -w stop >/dev/null 2>&1 || true
		fi
		rm -rf "$pg_tmp"
		pg_tmp=""
	fi
}

start_postgres() {
	if ! pg_bin="$(pg_bindir)"; then
		log "no PostgreSQL server binaries found; installing postgresql"
		apt_install postgresql
		pg_bin="$(pg_bindir)" || {
			log "postgresql installed but initdb/pg_ctl not found"
			exit 1
		}
	fi

	# In /tmp, whatever TMPDIR says: the postgres user must reach it, and the
	# unix socket path must stay short.
	pg_tmp="$(mktemp -d /tmp/outbox-pg.XXXXXX)"
	trap stop_postgres EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	if is_root; then
		if ! id -u postgres >/dev/null 2>&1; then
			log "creating the system user postgres"
			useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres
		fi
		chown postgres: "$pg_tmp"
		pg_as=(runuser -u postgres --)
	else
		pg_as=(env)
	fi
	chmod 700 "$pg_tmp"

	"${pg_as[@]}" "$pg_bin/initdb" -D "$pg_tmp/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$pg_tmp/initdb.log" 2>&1 || {
		cat "$pg_tmp/initdb.log" >&2
		exit 1
	}

	# A throwaway cluster: durability across an operating system crash does
	# not matter, so fsync is off to keep the tests fast.
	local port tries
	for tries in 1 2 3 4 5 6 7 8 9 10; do
		port=$((20000 + RANDOM % 30000))
		port_free "$port" || continue
		if "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_tmp/data" -l "$pg_tmp/postgres.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $pg_tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
			start >/dev/null; then
			export OUTBOX_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			# The failure test that restarts PostgreSQL under load runs a
			# server of its own from the same binaries.
			export OUTBOX_TEST_PG_BINDIR="$pg_bin"
			log "throwaway PostgreSQL $("$pg_bin/pg_ctl" --version | awk '{print $3}') on 127.0.0.1:$port (data in $pg_tmp)"
			return 0
		fi
		log "PostgreSQL did not start on port $port (try $tries):"
		tail -n 5 "$pg_tmp/postgres.log" >&2 || true
	done
	log "could not start PostgreSQL"
	exit 1
}

if [ -z "${OUTBOX_TEST_POSTGRES_DSN:-}" ]; then
	start_postgres
else
	log "using the PostgreSQL server of OUTBOX_TEST_POSTGRES_DSN"
fi

# staticcheck's version: the newest that builds with the Go of go.mod.
staticcheck_version=v0.8.2

log "gofmt -l ."
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
	log "these files are not gofmt-formatted (run gofmt -w on them):"
	printf '%s\n' "$unformatted" >&2
	exit 1
fi

log "go mod tidy -diff"
if ! go mod tidy -diff; then
	log "go.mod or go.sum is not tidy: run go mod tidy and commit the result"
	exit 1
fi

log "go vet ./..."
go vet ./...

gobin="$(go env GOPATH | cut -d: -f1)/bin"
log "staticcheck $staticcheck_version ./..."
GOBIN="$gobin" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
"$gobin/staticcheck" ./...

log "go test -race -count=1 -timeout 20m ./... $*"
go test -race -count=1 -timeout 20m ./... "$@"
