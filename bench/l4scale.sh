#!/usr/bin/env bash
# bench-l4scale: the L4 control plane's growth with the number of VIPs (docs/xdp.md, "Control-plane scale"). At
# 16, 256 and 4,096 VIPs of 16 backends (rings sized from the backends, at most 65537) the driver (bench/l4scale) starts the real
# daemon on a veth in a namespace pair of its own: cold (no pins), then again over its pins
# (adopt: it must write no ring slot), and times backend drains and undrains and `vip add` through
# the control socket; it reads the ring maps' kernel memory (fdinfo memlock of rings16 and
# prev_rings16, per ring slot and in all) and the daemon's resident anonymous memory (and its growth per VIP).
# Medians over ROUNDS rounds (default 3) of CHANGES changes each (default 5). Prints a table and
# writes bench/out/l4scale.json (flat). A failed call, an adopt that rewrote slots or a daemon that
# did not come up fails the run, and no JSON is written. Needs root. BENCH_SMOKE=1: one round of
# 2 changes at 16 and 256 VIPs. VIPS=16,256,4096, RING=65537 (the cap of automatic ring sizes) and
# RING_SIZING=auto (fixed: every ring RING slots, as before per-VIP rings) override the sizes. PROF_DIR=dir
# runs the daemon as bench/prof and writes a Go CPU profile of every start (N-cold-R-start.pprof,
# N-adopt-R-start.pprof: until the socket is served) and of the rest of every run (...-run.pprof:
# the drains and vip adds follow an adopt) into dir, and its JSON there (profiled figures are not
# the bench's); read them with go tool pprof -top.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=l4scale
. bench/lib.sh
ROUNDS=${ROUNDS:-3}
CHANGES=${CHANGES:-5}
VIPS=${VIPS:-16,256,4096}
RING_SIZING=${RING_SIZING:-auto}
RING=${RING:-65537}
SMOKE_FLAG=
if is_smoke; then ROUNDS=1 CHANGES=2 VIPS=16,256 SMOKE_FLAG=-smoke; fi
[ "$(id -u)" = 0 ] || bench_fail "needs root (network namespaces, XDP)"
require_binary bin/switchyard "$BENCH"
DRIVER=$(mktemp /tmp/switchyard-l4scale-bench.XXXXXX)
raw=$(mktemp)
trap 'rm -f "$DRIVER" "$raw"' EXIT
go build -o "$DRIVER" ./bench/l4scale
PROF_FLAG=
OUT=bench/out/l4scale.json
if [ -n "${PROF_DIR:-}" ]; then
  mkdir -p "$PROF_DIR"
  go build -o "$PROF_DIR/prof" ./bench/prof
  PROF_FLAG="-prof $PROF_DIR"
  OUT=$PROF_DIR/l4scale.json
fi
# shellcheck disable=SC2086
"$DRIVER" -bin bin/switchyard -vips "$VIPS" -ring "$RING" -ring-sizing "$RING_SIZING" -rounds "$ROUNDS" -changes "$CHANGES" -out "$raw" $SMOKE_FLAG $PROF_FLAG ||
  bench_fail "the driver stopped (its message is above)"
write_json "$OUT" <"$raw"
