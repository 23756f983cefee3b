#!/usr/bin/env bash
# bench/l7.sh — switchyard's L7 proxy against HAProxy (HTTP mode) and nginx (reverse proxy), all
# three in front of the same nginx backend on loopback, in one run, several rounds alternating.
# Load is wrk over persistent HTTP/1.1 connections, then h2load over h2c (prior knowledge, HTTP/1.1
# upstream); each proxy keeps a pool of upstream keep-alive connections and writes no access log.
# Each proxy gets the same CPU budget (2 workers/threads/GOMAXPROCS) and its CPU time per request
# is read from /proc during its own runs.
# Prints tables and writes a flat JSON object to bench/out/l7.json. Tunables (environment): ROUNDS (3), DURATION seconds per run (5),
# CONNS (64), THREADS (2). Wrap in the shared lock, e.g. flock /tmp/switchyard-bench.lock bash bench/l7.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
BACKEND_PORT=18180 SW_PORT=18181 NGINX_PORT=18182 HAPROXY_PORT=18183 NGINX_H2_PORT=18185 HAPROXY_H2_PORT=18186

ensure_packages wrk nginx haproxy nghttp2-client
[ -x bin/switchyard ] || go build -o bin/switchyard ./cmd/switchyard

work=$(mktemp -d /tmp/switchyard-bench-l7.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The backend: one nginx worker answering a small JSON body, like the lessons' replicas.
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
  }
}
CONF

cat >"$work/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream app { server 127.0.0.1:$BACKEND_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
  server {
    listen 127.0.0.1:$NGINX_H2_PORT http2;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF

cat >"$work/haproxy.cfg" <<CONF
global
  nbthread 2
  maxconn 3000
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option forwardfor
  http-reuse always
frontend fe
  bind 127.0.0.1:$HAPROXY_PORT
  default_backend be
frontend fe_h2
  bind 127.0.0.1:$HAPROXY_H2_PORT proto h2
  default_backend be
backend be
  server app 127.0.0.1:$BACKEND_PORT maxconn 2000
CONF

cat >"$work/l7.yaml" <<CONF
listeners: [{address: "127.0.0.1:$SW_PORT", h2c: true}]
access_log: "off"
limits: {max_in_flight: 20000}
routes: [{name: all, pool: app}]
pools: [{name: app, balance: round_robin, backends: [{address: "127.0.0.1:$BACKEND_PORT"}]}]
CONF

# Same CPU budget for each proxy: nginx 2 workers, HAProxy 2 threads, switchyard GOMAXPROCS=2.
nginx -c "$work/backend.conf" & pids+=($!)
nginx -c "$work/nginx.conf" & pids+=($!); nginx_pid=$!
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 & pids+=($!); haproxy_pid=$!
GOMAXPROCS=2 ./bin/switchyard l7 run --config "$work/l7.yaml" --log-level warn 2>"$work/l7.log" & pids+=($!); sw_pid=$!

for port in $BACKEND_PORT $NGINX_PORT $HAPROXY_PORT $SW_PORT; do
  for _ in $(seq 50); do curl -fs -o /dev/null "http://127.0.0.1:$port/tracking" && break; sleep 0.1; done
  curl -fs -o /dev/null "http://127.0.0.1:$port/tracking" || { echo "port $port did not come up" >&2; cat "$work"/*.log "$work"/*.err 2>/dev/null >&2; exit 1; }
done

# to_ms converts wrk's latency figures (us, ms, s) to milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n=v+0; if (v ~ /us$/) n/=1000; else if (v ~ /ms$/) n=n; else if (v ~ /s$/) n*=1000; printf "%.3f", n }'; }

declare -A rps p50 p99 cpu
names=(switchyard nginx haproxy)
declare -A port=([switchyard]=$SW_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT)
# CPU per request of each proxy (user + system, from /proc, all threads; nginx: its workers).
declare -A procs=([switchyard]="$sw_pid" [nginx]="$(pgrep -P "$nginx_pid" | tr '\n' ' ')" [haproxy]="$haproxy_pid")
tick=$(getconf CLK_TCK)
cpu_ticks() { local t=0 f; for p in "$@"; do for f in /proc/"$p"/task/*/stat; do t=$((t + $(awk '{print $14+$15}' "$f" 2>/dev/null || echo 0))); done; done; echo "$t"; }

# Warm each proxy's upstream pool so the first round does not pay for connection setup.
for n in "${names[@]}"; do wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:${port[$n]}/tracking" >/dev/null; done

echo "L7 benchmark: wrk -t$THREADS -c$CONNS -d${DURATION}s, $ROUNDS rounds alternating, same nginx backend, loopback, $(nproc) cores"
for r in $(seq "$ROUNDS"); do
  # Rotate the order every round so no proxy always runs first or last.
  order=("${names[@]:$(( (r-1) % 3 ))}" "${names[@]:0:$(( (r-1) % 3 ))}")
  for n in "${order[@]}"; do
    t0=$(cpu_ticks ${procs[$n]})
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:${port[$n]}/tracking?no=1")
    t1=$(cpu_ticks ${procs[$n]})
    errs=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}')
    [ -z "$errs" ] || echo "  round $r $n: $errs" >&2
    rps[$n]="${rps[$n]:-} $(echo "$out" | awk '/Requests\/sec/ {print $2}')"
    p50[$n]="${p50[$n]:-} $(to_ms "$(echo "$out" | awk '$1=="50%" {print $2}')")"
    p99[$n]="${p99[$n]:-} $(to_ms "$(echo "$out" | awk '$1=="99%" {print $2}')")"
    cpu[$n]="${cpu[$n]:-} $(awk -v d=$((t1 - t0)) -v t="$tick" -v r="$(echo "${rps[$n]}" | awk '{print $NF}')" -v s="$DURATION" 'BEGIN { printf "%.1f", d / t / (r * s) * 1e6 }')"
    printf "  round %d %-10s %10.0f req/s  p50 %7s ms  p99 %7s ms  cpu %6s us/req\n" "$r" "$n" \
      "$(echo "${rps[$n]}" | awk '{print $NF}')" "$(echo "${p50[$n]}" | awk '{print $NF}')" "$(echo "${p99[$n]}" | awk '{print $NF}')" \
      "$(echo "${cpu[$n]}" | awk '{print $NF}')"
  done
done

# median of a list of numbers
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{a[NR]=$1} END { if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }
declare -A mr m50 m99 mcpu
for n in "${names[@]}"; do mr[$n]=$(median "${rps[$n]}"); m50[$n]=$(median "${p50[$n]}"); m99[$n]=$(median "${p99[$n]}"); mcpu[$n]=$(median "${cpu[$n]}"); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a/b }'; }

echo
echo "median of $ROUNDS rounds"
printf "%-12s %12s %10s %10s %14s %14s %12s\n" proxy "req/s" "p50 ms" "p99 ms" "rps vs nginx" "p99 vs nginx" "cpu us/req"
for n in "${names[@]}"; do
  printf "%-12s %12.0f %10s %10s %14s %14s %12s\n" "$n" "${mr[$n]}" "${m50[$n]}" "${m99[$n]}" \
    "$(ratio "${mr[$n]}" "${mr[nginx]}")" "$(ratio "${m99[$n]}" "${m99[nginx]}")" "${mcpu[$n]}"
done
echo "switchyard vs haproxy: req/s ratio $(ratio "${mr[switchyard]}" "${mr[haproxy]}"), p99 ratio $(ratio "${m99[switchyard]}" "${m99[haproxy]}")"
echo "target: req/s ratio vs nginx >= 1.000 with p99 ratio <= 1.000"

# HTTP/2 (h2c prior knowledge): h2load reports req/s and the mean time per request (no percentiles).
declare -A h2port=([switchyard]=$SW_PORT [nginx]=$NGINX_H2_PORT [haproxy]=$HAPROXY_H2_PORT)
declare -A h2rps h2mean
echo
echo "h2c: h2load -c16 -m10 -t$THREADS -D$DURATION, $ROUNDS rounds alternating"
for r in $(seq "$ROUNDS"); do
  order=("${names[@]:$(( (r-1) % 3 ))}" "${names[@]:0:$(( (r-1) % 3 ))}")
  for n in "${order[@]}"; do
    out=$(h2load -c16 -m10 -t"$THREADS" -D"$DURATION" "http://127.0.0.1:${h2port[$n]}/tracking?no=1" 2>&1)
    failed=$(echo "$out" | awk '/^requests:/ {print $(NF-5)}')
    [ "${failed:-0}" = "0" ] || echo "  round $r $n: $failed failed requests" >&2
    h2rps[$n]="${h2rps[$n]:-} $(echo "$out" | awk '/^finished in/ {print $4}')"
    h2mean[$n]="${h2mean[$n]:-} $(to_ms "$(echo "$out" | awk '/^time for request:/ {print $6}')")"
    printf "  round %d %-10s %10.0f req/s  mean %7s ms\n" "$r" "$n" "$(echo "${h2rps[$n]}" | awk '{print $NF}')" "$(echo "${h2mean[$n]}" | awk '{print $NF}')"
  done
done
declare -A h2r h2m
for n in "${names[@]}"; do h2r[$n]=$(median "${h2rps[$n]}"); h2m[$n]=$(median "${h2mean[$n]}"); done
printf "%-12s %12s %10s %14s\n" proxy "h2 req/s" "mean ms" "rps vs nginx"
for n in "${names[@]}"; do
  printf "%-12s %12.0f %10s %14s\n" "$n" "${h2r[$n]}" "${h2m[$n]}" "$(ratio "${h2r[$n]}" "${h2r[nginx]}")"
done

mkdir -p bench/out
cat >bench/out/l7.json <<JSON
{"switchyard_rps": ${mr[switchyard]}, "nginx_rps": ${mr[nginx]}, "haproxy_rps": ${mr[haproxy]}, "switchyard_p50_ms": ${m50[switchyard]}, "nginx_p50_ms": ${m50[nginx]}, "haproxy_p50_ms": ${m50[haproxy]}, "switchyard_p99_ms": ${m99[switchyard]}, "nginx_p99_ms": ${m99[nginx]}, "haproxy_p99_ms": ${m99[haproxy]}, "ratio_vs_nginx": $(ratio "${mr[switchyard]}" "${mr[nginx]}"), "ratio_vs_haproxy": $(ratio "${mr[switchyard]}" "${mr[haproxy]}"), "p99_ratio_vs_nginx": $(ratio "${m99[switchyard]}" "${m99[nginx]}"), "h2_switchyard_rps": ${h2r[switchyard]}, "h2_nginx_rps": ${h2r[nginx]}, "h2_haproxy_rps": ${h2r[haproxy]}, "h2_switchyard_mean_ms": ${h2m[switchyard]}, "h2_nginx_mean_ms": ${h2m[nginx]}, "h2_haproxy_mean_ms": ${h2m[haproxy]}, "h2_ratio_vs_nginx": $(ratio "${h2r[switchyard]}" "${h2r[nginx]}"), "switchyard_cpu_us_per_req": ${mcpu[switchyard]}, "nginx_cpu_us_per_req": ${mcpu[nginx]}, "haproxy_cpu_us_per_req": ${mcpu[haproxy]}, "cpu_ratio_vs_nginx": $(ratio "${mcpu[switchyard]}" "${mcpu[nginx]}"), "rounds": $ROUNDS, "duration_s": $DURATION, "connections": $CONNS, "cores": $(nproc)}
JSON
echo "wrote bench/out/l7.json"
