#!/usr/bin/env bash
# bench/l4.sh — the L4 benchmark: the same wrk load (keep-alive, then a new connection per request)
# to the same two backends in a network-namespace lab, directly (the router sends the VIP straight
# to the backends: the limit), through switchyard's XDP VIP, through an nftables DNAT balancer and
# through HAProxy in TCP mode; one run, alternating rounds. Prints a table and writes a flat JSON
# object to bench/out/l4.json. Bounded: ROUNDS x 4 paths x 2 loads x SECONDS_PER_RUN of load
# (defaults 3 x 4 x 2 x 5 s = 2 minutes). Needs root. Run from the repository root (make bench-l4).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
XDP_MODE=${XDP_MODE:-native}
OUT=bench/out/l4.json

[ "$(id -u)" = 0 ] || { echo "l4 bench: needs root (network namespaces, XDP)" >&2; exit 1; }

. "$(dirname "$0")/lib.sh"
ensure_packages wrk haproxy nftables iproute2 util-linux

mkdir -p bench/out
DRIVER=$(mktemp /tmp/switchyard-l4-bench.XXXXXX)
trap 'rm -f "$DRIVER"' EXIT
go build -o "$DRIVER" ./bench/l4

# One benchmark at a time on a shared machine.
flock /tmp/switchyard-bench.lock "$DRIVER" -rounds "$ROUNDS" -duration "${SECONDS_PER_RUN}s" \
  -connections "$CONNECTIONS" -xdp-mode "$XDP_MODE" -out "$OUT"
