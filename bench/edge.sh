#!/usr/bin/env bash
# bench/edge.sh — cache-hit serving of a small (480 B) and a 100 KB object: switchyard's edge
# against Varnish and nginx proxy_cache, in front of the same origin, on the same machine, in one
# run, alternating rounds. wrk drives each cache; the table shows requests/s and p99, and the
# ratios. A second switchyard with the HTTP/1.1 fast path disabled (disable_fast_path: every hit
# through net/http) is measured in the same rounds as the before/after reference.
# Writes a flat JSON object to bench/out/edge.json, only when every round passed the checks of
# bench/lib.sh (ports free, every cache answering 200 before the rounds, no non-2xx answer, socket
# error or timeout in any round). BENCH_SMOKE=1: one round of 1 s per cell.
# The mixed row: keep-alive clients whose every tenth request is a miss (a new URL each time, from
# an origin that answers after 1 ms) and the rest hits of the small object (bench/edge/mixed.lua).
# Bounded: ROUNDS x 4 servers x 3 rows x SECONDS_PER_RUN of load (defaults 3 x 4 x 3 x 4 s).
# Run from the repository root after `go build -o bin/switchyard ./cmd/switchyard` (make bench-edge),
# wrapped in `flock /tmp/switchyard-bench.lock` on a shared machine.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
BIN=${BIN:-bin/switchyard}
OUT=bench/out/edge.json
PORT_ORIGIN=18180 PORT_SY=18181 PORT_VARNISH=18182 PORT_NGINX=18183 PORT_SYNET=18184

BENCH=edge
. "$(dirname "$0")/lib.sh"
if is_smoke; then ROUNDS=1 SECONDS_PER_RUN=1; fi
require_binary "$BIN" edge

ensure_packages varnish nginx wrk curl
# Only the HTTP ports are fixed (Varnish picks its management port itself).
ports_free $PORT_ORIGIN $PORT_SY $PORT_VARNISH $PORT_NGINX $PORT_SYNET

WORK=$(mktemp -d /tmp/switchyard-edge-bench.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
LOGS="$WORK/*.log"

go build -o "$WORK/origin" ./bench/edge
"$WORK/origin" -listen 127.0.0.1:$PORT_ORIGIN &
PIDS+=($!)

# switchyard: memory tier only, like the two peers' memory storage.
"$BIN" edge run --listen 127.0.0.1:$PORT_SY --origin http://127.0.0.1:$PORT_ORIGIN --memory 256MiB >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)
# The same edge with every hit through net/http: the reference the fast path is measured against.
cat > "$WORK/synet.yaml" <<YAML
listen: 127.0.0.1:$PORT_SYNET
origin: http://127.0.0.1:$PORT_ORIGIN
memory: {max_bytes: 256MiB}
disable_fast_path: true
YAML
"$BIN" edge run --config "$WORK/synet.yaml" >"$WORK/synet.log" 2>&1 &
PIDS+=($!)

# Varnish: default VCL with the origin as backend, 256 MB malloc storage, in the foreground.
varnishd -F -a 127.0.0.1:$PORT_VARNISH -b 127.0.0.1:$PORT_ORIGIN -s malloc,256m -n "$WORK/varnish" \
  >"$WORK/varnish.log" 2>&1 &
PIDS+=($!)

# nginx: proxy_cache in front of the origin, one worker per core, no access log (neither of the
# others logs requests either).
mkdir -p "$WORK/nginx-cache"
cat > "$WORK/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  proxy_cache_path $WORK/nginx-cache keys_zone=edge:64m max_size=256m;
  upstream origin { server 127.0.0.1:$PORT_ORIGIN; keepalive 64; }
  server {
    listen 127.0.0.1:$PORT_NGINX;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache edge;
      proxy_cache_lock on;
      add_header X-Cache \$upstream_cache_status;
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -g 'daemon off;' &
PIDS+=($!)

declare -A PORT=([switchyard]=$PORT_SY [varnish]=$PORT_VARNISH [nginx]=$PORT_NGINX [sy-nethttp]=$PORT_SYNET)
NAMES=(switchyard sy-nethttp varnish nginx)
http_ready "the origin" "http://127.0.0.1:$PORT_ORIGIN/small"
for name in "${NAMES[@]}"; do
  http_ready "$name" "http://127.0.0.1:${PORT[$name]}/small"
  # Warm: each cache fetches both objects once; the measured phase is hits only.
  for obj in small 100k; do
    for _ in 1 2; do http_200 "http://127.0.0.1:${PORT[$name]}/$obj" >/dev/null || bench_fail "warm-up $name /$obj: not 200"; done
  done
done
before=$(curl -s http://127.0.0.1:$PORT_ORIGIN/count)
misses_before=$(curl -s http://127.0.0.1:$PORT_ORIGIN/misscount)
OBJS=(small 100k mixed)

# run_wrk ROUND NAME OBJ -> checks the run and appends "rps p99_ms" to $WORK/NAME-OBJ. OBJ mixed
# runs bench/edge/mixed.lua, its miss URLs unique to the round and the cache.
run_wrk() {
  local out script=()
  local url="http://127.0.0.1:${PORT[$2]}/$3"
  if [ "$3" = mixed ]; then
    script=(-s bench/edge/mixed.lua)
    url="http://127.0.0.1:${PORT[$2]}/"
  fi
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency "${script[@]}" "$url" -- "$2-r$1" 2>&1) || bench_fail "round $1 $2 /$3: wrk failed: $out"
  check_wrk "round $1 $2 /$3" "$out"
  awk '
    /Requests\/sec:/ { rps = $2 }
    /^ *99%/ { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
               ms = (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }
    END { printf "%s %s\n", rps, ms }' <<<"$out" >> "$WORK/$2-$3"
}

ORDER=("${NAMES[@]}")
for r in $(seq 1 "$ROUNDS"); do
  for obj in "${OBJS[@]}"; do
    for name in "${ORDER[@]}"; do run_wrk "$r" "$name" "$obj"; done
  done
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")  # rotate who goes first each round
done
after=$(curl -s http://127.0.0.1:$PORT_ORIGIN/count)
misses_after=$(curl -s http://127.0.0.1:$PORT_ORIGIN/misscount)

# median of column $2 in file $1
median() { sort -g -k"$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }

declare -A RPS P99
for name in "${NAMES[@]}"; do
  for obj in "${OBJS[@]}"; do
    RPS[$name-$obj]=$(median "$WORK/$name-$obj" 1)
    P99[$name-$obj]=$(median "$WORK/$name-$obj" 2)
  done
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo
echo "edge cache hits: wrk -t$THREADS -c$CONNECTIONS, ${SECONDS_PER_RUN}s x $ROUNDS rounds per cell (median), $(nproc) cores shared by load and servers"
printf '%-11s | %-6s | %12s | %9s | %9s | %9s\n' cache object "requests/s" "p99 ms" "vs varnish" "vs nginx"
printf -- '------------|--------|--------------|-----------|-----------|----------\n'
for obj in "${OBJS[@]}"; do
  for name in "${NAMES[@]}"; do
    printf '%-11s | %-6s | %12.0f | %9.2f | %9s | %9s\n' "$name" "$obj" "${RPS[$name-$obj]}" "${P99[$name-$obj]}" \
      "$(ratio "${RPS[$name-$obj]}" "${RPS[varnish-$obj]}")" "$(ratio "${RPS[$name-$obj]}" "${RPS[nginx-$obj]}")"
  done
done
echo "sy-nethttp = switchyard with disable_fast_path: true (net/http for every hit), the before reference"
echo "fast path vs net/http path: small $(ratio "${RPS[switchyard-small]}" "${RPS[sy-nethttp-small]}")x, 100k $(ratio "${RPS[switchyard-100k]}" "${RPS[sy-nethttp-100k]}")x"
echo "mixed = 90% hits of the small object, 10% misses (new URLs, origin latency 1 ms), keep-alive"
echo "origin requests during the measured phase: $((after - before)) (0 means every measured hit row was all hits); mixed-row misses fetched: $((misses_after - misses_before))"

write_json "$OUT" <<JSON
{
  "switchyard_rps": ${RPS[switchyard-small]},
  "varnish_rps": ${RPS[varnish-small]},
  "nginx_rps": ${RPS[nginx-small]},
  "nethttp_rps": ${RPS[sy-nethttp-small]},
  "nethttp_p99_ms": ${P99[sy-nethttp-small]},
  "nethttp_100k_rps": ${RPS[sy-nethttp-100k]},
  "ratio_fast_vs_nethttp": $(ratio "${RPS[switchyard-small]}" "${RPS[sy-nethttp-small]}"),
  "ratio_100k_fast_vs_nethttp": $(ratio "${RPS[switchyard-100k]}" "${RPS[sy-nethttp-100k]}"),
  "switchyard_p99_ms": ${P99[switchyard-small]},
  "varnish_p99_ms": ${P99[varnish-small]},
  "nginx_p99_ms": ${P99[nginx-small]},
  "ratio_vs_varnish": $(ratio "${RPS[switchyard-small]}" "${RPS[varnish-small]}"),
  "ratio_vs_nginx": $(ratio "${RPS[switchyard-small]}" "${RPS[nginx-small]}"),
  "switchyard_100k_rps": ${RPS[switchyard-100k]},
  "varnish_100k_rps": ${RPS[varnish-100k]},
  "nginx_100k_rps": ${RPS[nginx-100k]},
  "switchyard_100k_p99_ms": ${P99[switchyard-100k]},
  "varnish_100k_p99_ms": ${P99[varnish-100k]},
  "nginx_100k_p99_ms": ${P99[nginx-100k]},
  "ratio_100k_vs_varnish": $(ratio "${RPS[switchyard-100k]}" "${RPS[varnish-100k]}"),
  "ratio_100k_vs_nginx": $(ratio "${RPS[switchyard-100k]}" "${RPS[nginx-100k]}"),
  "mixed_switchyard_rps": ${RPS[switchyard-mixed]},
  "mixed_varnish_rps": ${RPS[varnish-mixed]},
  "mixed_nginx_rps": ${RPS[nginx-mixed]},
  "mixed_nethttp_rps": ${RPS[sy-nethttp-mixed]},
  "mixed_switchyard_p99_ms": ${P99[switchyard-mixed]},
  "mixed_varnish_p99_ms": ${P99[varnish-mixed]},
  "mixed_nginx_p99_ms": ${P99[nginx-mixed]},
  "mixed_nethttp_p99_ms": ${P99[sy-nethttp-mixed]},
  "mixed_ratio_vs_varnish": $(ratio "${RPS[switchyard-mixed]}" "${RPS[varnish-mixed]}"),
  "mixed_ratio_vs_nginx": $(ratio "${RPS[switchyard-mixed]}" "${RPS[nginx-mixed]}"),
  "mixed_origin_misses": $((misses_after - misses_before)),
  "origin_requests_measured": $((after - before)),
  "rounds": $ROUNDS,
  "seconds_per_run": $SECONDS_PER_RUN,
  "connections": $CONNECTIONS,
  "smoke": $(smoke_json)
}
JSON
