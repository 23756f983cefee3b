#!/usr/bin/env bash
# bench/l4.sh — the L4 benchmark: the same wrk load (keep-alive, then a new connection per request)
# to the same two backends in a network-namespace lab, directly (the router sends the VIP straight
# to the backends: the limit), through switchyard's XDP VIP, through the XDP path's hops with a
# MAC-swap XDP_TX program in place of the forwarder (floor: what the lab's second hop costs before
# any balancer work), through an nftables DNAT balancer and through HAProxy in TCP mode; one run,
# alternating rounds (the order rotates and reverses from round to round). Prints a table of
# medians with the machine's CPU per request by kind, the ratios both of the medians and within
# each round (median, min..max), and writes a flat JSON object to bench/out/l4.json. Bounded:
# ROUNDS x 5 paths x 2 loads x SECONDS_PER_RUN of load, plus one run per load for the XDP
# program's own CPU, plus at most ROUNDS repeats of runs that other processes disturbed (defaults
# 6 x 5 x 2 x 3 s + 2 x 3 s: about 5 minutes with set-up).
# MODES=direct,xdp,... picks the paths (besides the default five: routed, the balancer host as a
# plain IP router on the XDP path's hops; xdpgen, the forwarder in generic mode).
# PERF_DIR=dir adds one profiled run per path and load (perf record -a -g, not counted) and writes
# there each run's inclusive CPU per request of the packet path's stages and its flat profile.
# Needs root. Run from the repository root (make bench-l4).
# The driver checks every path answers 200 through the VIP before each run, and fails the bench
# (no JSON written; the JSON is written with a rename) on any non-2xx answer or socket error in a
# run. Every address it uses is inside the lab's namespaces: no host port to check.
# BENCH_SMOKE=1: one round of 1 s per path and load.
set -euo pipefail
BENCH=l4

ROUNDS=${ROUNDS:-6}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
CONNECTIONS=${CONNECTIONS:-50}
XDP_MODE=${XDP_MODE:-native}
PERF_DIR=${PERF_DIR:-}
MODES=${MODES:-direct,xdp,floor,nft,haproxy}
OUT=bench/out/l4.json

[ "$(id -u)" = 0 ] || { echo "l4 bench: needs root (network namespaces, XDP)" >&2; exit 1; }

. "$(dirname "$0")/lib.sh"
SMOKE_FLAG=
if is_smoke; then ROUNDS=1 SECONDS_PER_RUN=1 SMOKE_FLAG=-smoke; fi
ensure_packages wrk haproxy nftables iproute2 util-linux

mkdir -p bench/out
DRIVER=$(mktemp /tmp/switchyard-l4-bench.XXXXXX)
trap 'rm -f "$DRIVER"' EXIT
go build -o "$DRIVER" ./bench/l4

# One benchmark at a time on a shared machine.
flock /tmp/switchyard-bench.lock "$DRIVER" -rounds "$ROUNDS" -duration "${SECONDS_PER_RUN}s" \
  -connections "$CONNECTIONS" -xdp-mode "$XDP_MODE" -modes "$MODES" -perf "$PERF_DIR" -out "$OUT" $SMOKE_FLAG ||
  bench_fail "the driver stopped (its message is above)"
