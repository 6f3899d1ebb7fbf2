#!/usr/bin/env bash
# Compares the outbox's ingest and dispatch on PostgreSQL with the peer's
# (River's) batch insert and burn-down, alternately, and prints each
# figure's range over the rounds.
#
#   acceptance/peer/compare.sh [-n ROUNDS] [-o OUTBOX_TREE] DSN
#
# DSN is a PostgreSQL server's URL (each benchmark creates its own
# database or schema there and drops it). OUTBOX_TREE is the outbox
# checkout whose benchmarks run (default: the one holding this script), so
# that a branch can be measured against the same peer. The test binaries
# are built once, before the first round; each run then holds
# /tmp/bench.lock (flock), so that benchmarks of others on the machine never
# overlap with it. Environment: INGEST_N (default 200000) and DISPATCH_N
# (default 100000) are the -benchtime counts; OUT (default a temporary
# directory) keeps each run's output. After the ranges it prints, round by
# round, the outbox's rates over the peer's of the same round.
set -euo pipefail

rounds=3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tree="$(cd "$here/../.." && pwd)"
while getopts "n:o:" opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	o) tree="$(cd "$OPTARG" && pwd)" ;;
	*) echo "usage: $0 [-n ROUNDS] [-o OUTBOX_TREE] DSN" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ]; then
	echo "usage: $0 [-n ROUNDS] [-o OUTBOX_TREE] DSN" >&2
	exit 2
fi
export OUTBOX_TEST_POSTGRES_DSN="$1"
ingest_n="${INGEST_N:-200000}"
dispatch_n="${DISPATCH_N:-100000}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
lock=/tmp/bench.lock

echo "building the test binaries (outbox: $tree)" >&2
(cd "$tree" && go test -c -o "$out/outbox.test" ./acceptance)
(cd "$here" && go test -c -o "$out/peer.test" .)

# run NAME BINARY DIR BENCH COUNT METRIC: one locked run; appends
# "NAME value" lines (one per sub-benchmark that reports METRIC, and one
# "NAME@cpu-µs/UNIT value" and "NAME@self-cpu-µs/UNIT value" per
# sub-benchmark that reports the machine's and its own process's CPU per
# unit of work, and "NAME@wal-bytes/UNIT value" for the write-ahead log the
# outbox's benchmarks report) to $out/figures.
run() {
	local name="$1" bin="$2" dir="$3" bench="$4" count="$5" metric="$6"
	local log="$out/$name.$round.log"
	echo "round $round: $name" >&2
	(cd "$dir" && flock "$lock" "$bin" -test.run '^$' -test.bench "$bench" \
		-test.benchtime "${count}x" -test.timeout 10m) >"$log" 2>&1 || {
		echo "$name failed; its output is in $log:" >&2
		tail -20 "$log" >&2
		exit 1
	}
	awk -v name="$name" -v metric="$metric" '
		/^Benchmark/ { sub(/-[0-9]+$/, "", $1)
			for (i = 2; i < NF; i++) {
				if ($(i + 1) == metric) print name " " $1 " " $i
				if ($(i + 1) ~ /cpu-µs\/|wal-bytes\//) print name " " $1 "@" $(i + 1) " " $i
			} }' "$log" >>"$out/figures"
}

: >"$out/figures"
for round in $(seq 1 "$rounds"); do
	run ingest "$out/outbox.test" "$tree/acceptance" '^BenchmarkIngest$/^postgres$' "$ingest_n" notifications/s
	run peer-insert "$out/peer.test" "$here" '^BenchmarkPeerInsert$' "$ingest_n" jobs/s
	run dispatch-100 "$out/outbox.test" "$tree/acceptance" '^BenchmarkDispatch$/^batch=100$/^postgres$' "$dispatch_n" deliveries/s
	run dispatch-1000 "$out/outbox.test" "$tree/acceptance" '^BenchmarkDispatch$/^batch=1000$/^postgres$' "$dispatch_n" deliveries/s
	run peer-burndown "$out/peer.test" "$here" '^BenchmarkPeerBurnDown$' "$dispatch_n" jobs/s
done

echo
echo "$rounds rounds, ingest ${ingest_n}x, dispatch ${dispatch_n}x; outputs in $out"
awk '{ key = $2; v = $3 + 0
	if (!(key in lo)) { order[n++] = key; lo[key] = v; hi[key] = v; all[key] = "" }
	if (v < lo[key]) lo[key] = v; if (v > hi[key]) hi[key] = v
	all[key] = all[key] sprintf(" %.0f", v) }
	END { for (i = 0; i < n; i++) { k = order[i]
		printf "%-60s %8.0f – %-8.0f (%s )\n", k, lo[k], hi[k], all[k] } }' "$out/figures"

# Round by round, the outbox's rate over the peer's: ingest over the COPY
# insert, and dispatch (each batch size) over the better of the peer's two
# burn-downs in the same round (its worker counts trade places run to run).
echo
echo "ours ÷ the peer's, round by round"
awk '{ key = $2; r = ++seen[key]; v[key, r] = $3 + 0; if (r > rounds) rounds = r }
	END {
		for (r = 1; r <= rounds; r++) {
			peer = v["BenchmarkPeerBurnDown/workers=800", r]
			if (v["BenchmarkPeerBurnDown/workers=1000", r] > peer) peer = v["BenchmarkPeerBurnDown/workers=1000", r]
			line = sprintf("round %d:", r)
			if (v["BenchmarkPeerInsert/InsertManyFast", r] > 0)
				line = line sprintf("  ingest %.2f×", v["BenchmarkIngest/postgres", r] / v["BenchmarkPeerInsert/InsertManyFast", r])
			if (peer > 0) {
				line = line sprintf("  dispatch batch 100 %.2f×", v["BenchmarkDispatch/batch=100/postgres", r] / peer)
				line = line sprintf("  batch 1000 %.2f×", v["BenchmarkDispatch/batch=1000/postgres", r] / peer)
			}
			print line
		}
	}' "$out/figures"
