#!/usr/bin/env bash
# bench/edge-range.sh — the edge bench's range row: time to the first byte of a 64 KiB range at
# 90% of a large object (a sparse 10 GiB file) from a cold cache, switchyard's edge with
# `slice: {size: 1MiB}` against nginx's slice module (`slice 1m` with proxy_cache), both in front
# of the same origin (bench/edge -range-file: http.ServeContent, strong ETag), and the origin
# itself as the floor. Every request asks for a new URL (a query naming server, round and
# sample), so every one is a cold miss; the servers alternate in rotating order each round.
# Checks: every answer 206 with the range's length; the origin sent at most one slice per cache
# request (neither cache fetched the object whole).
# Run by bench/edge.sh (RANGE_KEYS=FILE: the JSON keys are written there); alone it writes
# bench/out/edge-range.json. BENCH_SMOKE=1: one round of two samples.
# Run from the repository root after `go build -o bin/switchyard ./cmd/switchyard`.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SAMPLES=${RANGE_SAMPLES:-5}
OBJECT_SIZE=${RANGE_OBJECT_SIZE:-10G}
RANGE_LEN=65536
SLICE=1048576
BIN=${BIN:-bin/switchyard}
PORT_ORIGIN=${PORT_RANGE_ORIGIN:-18206} PORT_SY=${PORT_RANGE_SY:-18207} PORT_NGINX=${PORT_RANGE_NGINX:-18208}

BENCH=edge-range
. "$(dirname "$0")/lib.sh"
if is_smoke; then ROUNDS=1 SAMPLES=2; fi
require_binary "$BIN" edge
ensure_packages nginx curl procps
nginx -V 2>&1 | grep -q http_slice_module || bench_fail "this nginx has no slice module (http_slice_module); install Debian's nginx"
ports_free "$PORT_ORIGIN" "$PORT_SY" "$PORT_NGINX"

WORK=$(mktemp -d /tmp/switchyard-edge-range.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
LOGS="$WORK/*.log"

truncate -s "$OBJECT_SIZE" "$WORK/object.bin" # sparse: nothing is written
SIZE=$(stat -c %s "$WORK/object.bin")
START=$(( SIZE / 10 * 9 / SLICE * SLICE )) # 90% in, on a slice boundary: one slice for both caches
END=$(( START + RANGE_LEN - 1 ))

go build -o "$WORK/origin" ./bench/edge
"$WORK/origin" -listen 127.0.0.1:$PORT_ORIGIN -range-file "$WORK/object.bin" >"$WORK/origin.log" 2>&1 &
PIDS+=($!)

cat >"$WORK/edge.yaml" <<YAML
listen: 127.0.0.1:$PORT_SY
origin: http://127.0.0.1:$PORT_ORIGIN
memory: {max_bytes: 256MiB}
slice: {size: 1MiB, min_object: 8MiB}
YAML
"$BIN" edge run --config "$WORK/edge.yaml" >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)

# nginx: the slice module's documented setup (the slice range in the cache key and upstream
# Range), one worker per core, no access log.
mkdir -p "$WORK/nginx-cache"
cat >"$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  proxy_cache_path $WORK/nginx-cache keys_zone=range:16m max_size=1g;
  upstream origin { server 127.0.0.1:$PORT_ORIGIN; keepalive 16; }
  server {
    listen 127.0.0.1:$PORT_NGINX;
    location / {
      slice 1m;
      proxy_cache range;
      proxy_cache_key \$uri\$is_args\$args\$slice_range;
      proxy_set_header Range \$slice_range;
      proxy_cache_valid 200 206 1h;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://origin;
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -g 'daemon off;' >"$WORK/nginx.log" 2>&1 &
PIDS+=($!)

declare -A PORT=([switchyard]=$PORT_SY [nginx]=$PORT_NGINX [origin]=$PORT_ORIGIN)
NAMES=(switchyard nginx origin)

# range_ok URL succeeds when URL answers the range with 206 and its length; prints the time to
# the first byte in ms.
range_ok() {
  local said
  said=$(curl -s -o /dev/null -r "$START-$END" --max-time 30 -w '%{http_code} %{size_download} %{time_starttransfer}' "$1") || true
  read -r code got ttfb <<<"$said"
  [ "${code:-}" = 206 ] && [ "${got:-}" = "$RANGE_LEN" ] || { echo "answered '${said:-nothing}' (status, bytes, ttfb), want 206 and $RANGE_LEN bytes"; return 1; }
  awk -v t="$ttfb" 'BEGIN { printf "%.3f\n", t * 1000 }'
}

for name in "${NAMES[@]}"; do
  ready "$name" 10 range_ok "http://127.0.0.1:${PORT[$name]}/range/warmup?$name"
done
read -r req_before bytes_before <<<"$(curl -s http://127.0.0.1:$PORT_ORIGIN/rangecount)"

ORDER=("${NAMES[@]}")
for r in $(seq 1 "$ROUNDS"); do
  for name in "${ORDER[@]}"; do
    for i in $(seq 1 "$SAMPLES"); do
      url="http://127.0.0.1:${PORT[$name]}/range/object.bin?c=$name-$r-$i"
      ms=$(range_ok "$url") || bench_fail "round $r, $name, sample $i: $ms"
      echo "$ms" >>"$WORK/ttfb-$name"
    done
  done
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")
done
read -r req_after bytes_after <<<"$(curl -s http://127.0.0.1:$PORT_ORIGIN/rangecount)"

# Each cache request may cost the origin one slice (nginx may ask again for the object's first
# slice, to learn its length; both stay far below the object's size).
cold=$(( ROUNDS * SAMPLES ))
sent=$(( bytes_after - bytes_before ))
max=$(( cold * (2 * SLICE + RANGE_LEN) ))
[ "$sent" -le "$max" ] || bench_fail "the origin sent $sent bytes for $((3 * cold)) range requests (at most $max expected): a cache fetched more than its slices"

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A TTFB
for name in "${NAMES[@]}"; do TTFB[$name]=$(median "$WORK/ttfb-$name"); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo
echo "range row: first byte of a ${RANGE_LEN}-byte range at offset $START of a $SIZE-byte object, cold cache; $SAMPLES samples x $ROUNDS rounds (median)"
printf '%-10s | %8s | %s\n' server "ttfb ms" "nginx / this"
printf -- '-----------|----------|-------------\n'
for name in "${NAMES[@]}"; do
  printf '%-10s | %8s | %s\n' "$name" "${TTFB[$name]}" "$(ratio "${TTFB[nginx]}" "${TTFB[$name]}")"
done
echo "origin requests: $((req_after - req_before)), body bytes sent: $sent (the whole object would be $SIZE per cold request)"

keys() {
  cat <<KEYS
  "range_object_bytes": $SIZE,
  "range_offset": $START,
  "range_switchyard_ttfb_ms": ${TTFB[switchyard]},
  "range_nginx_ttfb_ms": ${TTFB[nginx]},
  "range_origin_ttfb_ms": ${TTFB[origin]},
  "range_ttfb_ratio_nginx": $(ratio "${TTFB[nginx]}" "${TTFB[switchyard]}"),
  "range_origin_bytes": $sent,
KEYS
}
if [ -n "${RANGE_KEYS:-}" ]; then
  keys >"$RANGE_KEYS"
else
  write_json bench/out/edge-range.json <<JSON
{
$(keys)
  "rounds": $ROUNDS,
  "samples": $SAMPLES,
  "smoke": $(smoke_json)
}
JSON
fi
