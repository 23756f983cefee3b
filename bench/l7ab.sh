#!/usr/bin/env bash
# bench/l7ab.sh — two switchyard builds against each other in one run, alternating rounds, on
# TLS listeners in front of one nginx backend: a same-run A/B for a change to the L7 engines.
#   bash bench/l7ab.sh OLD_BINARY NEW_BINARY
# Cells (CELLS, default "tls tlscps"): tls = wrk over persistent TLS HTTP/1.1 connections
# (-t2 -c64), tlscps = bench/tlsload full handshakes (-c16, a new connection per request);
# h1 = wrk over plain HTTP/1.1 (each build also gets a plain listener); gzip = the same with
# Accept-Encoding: gzip for bench/l7.sh's 20 KB JSON body, on a route compressing it at gzip
# level 5. Each round prints req/s
# (or handshakes/s), wrk's p99 and the build's CPU per request (or per handshake), from /proc.
# Tunables: ROUNDS (5), DURATION seconds (3), AB_PORT_BASE (18190; uses 5 ports from there).
# Wrap in the shared lock: flock /tmp/switchyard-bench.lock bash bench/l7ab.sh A B
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=l7ab
. bench/lib.sh
[ $# -eq 2 ] || { echo "usage: bash bench/l7ab.sh OLD_BINARY NEW_BINARY" >&2; exit 2; }
declare -A bin=([A]=$1 [B]=$2)
for n in A B; do [ -x "${bin[$n]}" ] || { echo "l7ab bench: ${bin[$n]} is not an executable" >&2; exit 2; }; done
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-3} CELLS=${CELLS:-tls tlscps}
base=${AB_PORT_BASE:-18190}
BACKEND_PORT=$base
declare -A tlsport=([A]=$((base + 1)) [B]=$((base + 2))) port=([A]=$((base + 3)) [B]=$((base + 4)))
ensure_packages wrk nginx openssl curl
ports_free $BACKEND_PORT ${tlsport[A]} ${tlsport[B]} ${port[A]} ${port[B]}

work=$(mktemp -d /tmp/switchyard-bench-l7ab.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
LOGS="$work/*.log $work/*.err"
write_big_json "$work/big.json"
go build -o "$work/tlsload" ./bench/tlsload
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench.test \
  -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat >"$work/backend.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/backend.pid;
error_log $work/backend.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$BACKEND_PORT;
    location / { default_type application/json; return 200 '{"state":"at transfer hub","zone":"35","step":4}'; }
    location = /big.json { default_type application/json; alias $work/big.json; }
  }
}
CONF
nginx -c "$work/backend.conf" & pids+=($!)
declare -A pid
for n in A B; do
  cat >"$work/$n.yaml" <<CONF
listeners:
  - {address: "127.0.0.1:${port[$n]}"}
  - {address: "127.0.0.1:${tlsport[$n]}", tls: {certificates: [{cert: "$work/cert.pem", key: "$work/key.pem"}]}}
access_log: "off"
limits: {max_in_flight: 20000}
routes:
  - name: gzip
    match: {path: {exact: /big.json}}
    pool: app
    compress: {encodings: [gzip], types: [application/json], levels: {gzip: 5}}
  - {name: all, pool: app}
pools: [{name: app, balance: round_robin, backends: [{address: "127.0.0.1:$BACKEND_PORT"}]}]
CONF
  GOMAXPROCS=2 "${bin[$n]}" l7 run --config "$work/$n.yaml" --log-level warn 2>"$work/$n.log" & pids+=($!)
  pid[$n]=$!
done
http_ready "the nginx backend" "http://127.0.0.1:$BACKEND_PORT/"
for n in A B; do
  http_ready "build $n (TLS)" "https://127.0.0.1:${tlsport[$n]}/"
  http_ready "build $n" "http://127.0.0.1:${port[$n]}/"
  out=$(wrk -t1 -c64 -d1s "https://127.0.0.1:${tlsport[$n]}/" 2>&1) || bench_fail "warm-up $n: $out"
  check_wrk "warm-up $n" "$out"
  curl -sf -H 'Accept-Encoding: gzip' --max-time 2 "http://127.0.0.1:${port[$n]}/big.json" | gunzip -c | cmp -s - "$work/big.json" ||
    bench_fail "build $n: /big.json is not answered gzip-encoded, decoding to the backend's body"
done
ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }
tick=$(getconf CLK_TCK)
echo "l7 A/B: A=${bin[A]} B=${bin[B]}; $ROUNDS rounds of ${DURATION}s alternating; $(nproc) cores"
for cell in $CELLS; do
  for r in $(seq "$ROUNDS"); do
    order="A B"; [ $((r % 2)) = 0 ] && order="B A"
    for n in $order; do
      what="round $r $cell $n" t0=$(ticks "${pid[$n]}") p99=-
      case $cell in
      tls|h1|gzip)
        url="https://127.0.0.1:${tlsport[$n]}/tracking?no=1" hdr=()
        [ "$cell" = h1 ] && url="http://127.0.0.1:${port[$n]}/tracking?no=1"
        [ "$cell" = gzip ] && url="http://127.0.0.1:${port[$n]}/big.json" hdr=(-H "Accept-Encoding: gzip")
        out=$(wrk -t2 -c64 -d"${DURATION}s" --latency "${hdr[@]}" "$url" 2>&1) || bench_fail "$what: wrk failed: $out"
        check_wrk "$what" "$out"
        v=$(awk '/Requests\/sec/ {print $2}' <<<"$out") p99=$(awk '$1=="99%" {print $2}' <<<"$out") ;;
      tlscps)
        out=$("$work/tlsload" -addr "127.0.0.1:${tlsport[$n]}" -path "/tracking?no=1" -c 16 -d "${DURATION}s" 2>&1) ||
          bench_fail "$what: $out"
        v=$(grep -o 'cps=[0-9.]*' <<<"$out" | cut -d= -f2) ;;
      *) bench_fail "unknown cell $cell (h1, tls, tlscps, gzip)" ;;
      esac
      t1=$(ticks "${pid[$n]}")
      printf "  %-6s round %d %s %10.0f /s  p99 %9s  cpu %7.1f us each\n" "$cell" "$r" "$n" "$v" "$p99" \
        "$(awk -v d=$((t1 - t0)) -v t="$tick" -v v="$v" -v s="$DURATION" 'BEGIN { print d / t / (v * s) * 1e6 }')"
    done
  done
done
