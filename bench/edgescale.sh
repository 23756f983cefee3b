#!/usr/bin/env bash
# bench/edgescale.sh — the edge at scale: memory per object, GC and hit p99 at a small and a large
# object count, and purge costs (bench/edgescale/main.go runs an edge in its own process, stores
# 1 KB objects through the true-push path and drives hits with wrk). Writes
# bench/out/edgescale.json only when every phase passed (no non-2xx answer or socket error; every
# figure present). Bounded: two loads (OBJECTS, default 10000 and 1000000, about a minute for the
# million) and SECONDS_PER_RUN of wrk per count. BENCH_SMOKE=1: 10000 and 50000 objects, 1 s.
# Run from the repository root, wrapped in `flock /tmp/switchyard-bench.lock` on a shared machine.
set -euo pipefail

OBJECTS=${OBJECTS:-10000,1000000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
OUT=bench/out/edgescale.json
PORT_EDGE=18186

BENCH=edgescale
. "$(dirname "$0")/lib.sh"
if is_smoke; then OBJECTS=10000,50000 SECONDS_PER_RUN=1; fi
ensure_packages wrk
ports_free $PORT_EDGE

WORK=$(mktemp -d /tmp/switchyard-edgescale.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
go build -o "$WORK/edgescale" ./bench/edgescale
"$WORK/edgescale" -objects "$OBJECTS" -seconds "$SECONDS_PER_RUN" -listen 127.0.0.1:$PORT_EDGE >"$WORK/out.json" ||
  bench_fail "the scale run failed (see above)"
cat "$WORK/out.json"
sed 's/^}$/  ,"smoke": '"$(smoke_json)"'\n}/' "$WORK/out.json" | write_json "$OUT"
