#!/usr/bin/env bash
# bench/l7.sh — switchyard's L7 proxy against HAProxy (HTTP mode) and nginx (reverse proxy), all
# three in front of the same nginx backend on loopback, in one run, several rounds alternating.
# Cells, each measured in its own alternating rounds:
#   h1     wrk over persistent HTTP/1.1 connections (plus each proxy's CPU per request, from /proc);
#   h2c    h2load over h2c (prior knowledge);
#   tls    wrk over persistent TLS 1.3 HTTP/1.1 connections;
#   tlscps full TLS 1.3 handshakes per second (bench/tlsload: a new connection per request, no
#          session cache; every handshake counted and checked not resumed);
#   h2tls  h2load over TLS 1.3 with ALPN h2.
# HTTP/1.1 upstream everywhere; each proxy keeps a pool of upstream keep-alive connections and
# writes no access log. Each proxy gets the same CPU budget (2 workers/threads/GOMAXPROCS). TLS:
# one ECDSA P-256 certificate made at run time with openssl, TLS 1.2-1.3 offered, the TLS 1.3
# suites in the same order (AES-128-GCM first, which Go's server picks on AES hardware), X25519;
# the run fails unless every proxy negotiated the same version, suite and group.
# Every round is checked (bench/lib.sh): a non-2xx answer, a socket error, a timeout or a peer
# that did not start fails the run, and then no JSON is written.
# Prints tables and writes a flat JSON object to bench/out/l7.json. Tunables (environment):
# ROUNDS (3), DURATION seconds per run (5), CONNS (64), THREADS (2); BENCH_SMOKE=1: one round of
# 1 s per cell. Wrap in the shared lock, e.g. flock /tmp/switchyard-bench.lock bash bench/l7.sh
# BENCH_L7_BACKEND_STATUS (200) is the status the backend answers: a way to see the checks fail.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=l7
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
if is_smoke; then ROUNDS=1 DURATION=1; fi
BACKEND_STATUS=${BENCH_L7_BACKEND_STATUS:-200}
BACKEND_PORT=18180 SW_PORT=18181 NGINX_PORT=18182 HAPROXY_PORT=18183 SW_TLS_PORT=18184
NGINX_H2_PORT=18185 HAPROXY_H2_PORT=18186 NGINX_TLS_PORT=18187 HAPROXY_TLS_PORT=18188

ensure_packages wrk nginx haproxy nghttp2-client curl openssl procps
[ -x bin/switchyard ] || go build -o bin/switchyard ./cmd/switchyard
ports_free $BACKEND_PORT $SW_PORT $NGINX_PORT $HAPROXY_PORT $SW_TLS_PORT $NGINX_H2_PORT $HAPROXY_H2_PORT $NGINX_TLS_PORT $HAPROXY_TLS_PORT

work=$(mktemp -d /tmp/switchyard-bench-l7.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
LOGS="$work/*.log $work/*.err"
go build -o "$work/tlsload" ./bench/tlsload

# One ECDSA P-256 certificate for all three proxies, made for this run.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench.test \
  -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat "$work/cert.pem" "$work/key.pem" >"$work/haproxy.pem"
# The TLS 1.3 suites in one order for the OpenSSL proxies, the order Go's server uses on AES
# hardware (it does not let it be configured); each server picks by its own order.
SUITES=TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256

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
    location / { default_type application/json; return $BACKEND_STATUS '{"state":"at transfer hub","zone":"35","step":4}'; }
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
  server {
    listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites $SUITES;
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
  ssl-default-bind-ciphersuites $SUITES
  ssl-default-bind-options ssl-min-ver TLSv1.2
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
frontend fe_tls
  bind 127.0.0.1:$HAPROXY_TLS_PORT ssl crt $work/haproxy.pem alpn h2,http/1.1
  default_backend be
backend be
  server app 127.0.0.1:$BACKEND_PORT maxconn 2000
CONF

cat >"$work/l7.yaml" <<CONF
listeners:
  - {address: "127.0.0.1:$SW_PORT", h2c: true}
  - {address: "127.0.0.1:$SW_TLS_PORT", tls: {certificates: [{cert: "$work/cert.pem", key: "$work/key.pem"}]}}
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

names=(switchyard nginx haproxy)
declare -A port=([switchyard]=$SW_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT)
declare -A h2port=([switchyard]=$SW_PORT [nginx]=$NGINX_H2_PORT [haproxy]=$HAPROXY_H2_PORT)
declare -A tlsport=([switchyard]=$SW_TLS_PORT [nginx]=$NGINX_TLS_PORT [haproxy]=$HAPROXY_TLS_PORT)

# Every peer answers 200 on every listener the rounds use before they start.
http_ready "the nginx backend" "http://127.0.0.1:$BACKEND_PORT/tracking"
h2c_200() { local s; s=$(curl -s --http2-prior-knowledge -o /dev/null -w "%{http_code} HTTP/%{http_version}" --max-time 2 "$1") || true; [ "$s" = "200 HTTP/2" ] || { echo "answered ${s:-nothing}"; return 1; }; }
h2tls_200() { local s; s=$(curl -sk --http2 -o /dev/null -w "%{http_code} HTTP/%{http_version}" --max-time 2 "$1") || true; [ "$s" = "200 HTTP/2" ] || { echo "answered ${s:-nothing}"; return 1; }; }
for n in "${names[@]}"; do
  http_ready "$n (HTTP/1.1)" "http://127.0.0.1:${port[$n]}/tracking"
  ready "$n (h2c)" 10 h2c_200 "http://127.0.0.1:${h2port[$n]}/tracking"
  http_ready "$n (TLS, HTTP/1.1)" "https://127.0.0.1:${tlsport[$n]}/tracking"
  ready "$n (TLS, h2)" 10 h2tls_200 "https://127.0.0.1:${tlsport[$n]}/tracking"
done

# The handshake cell's "none resumed" means something only if the servers would resume: with a
# session cache tlsload resumes against each (a third of a second, not measured), without one
# (the rounds) it cannot.
for n in "${names[@]}"; do
  out=$("$work/tlsload" -addr "127.0.0.1:${tlsport[$n]}" -path /tracking -c 1 -d 300ms -resume 2>/dev/null || true)
  echo "  $n resumes TLS sessions when a client offers one: $(grep -o 'resumed=[0-9]*' <<<"$out") of $(grep -o 'handshakes=[0-9]*' <<<"$out") with a session cache; the handshake rounds offer none"
done

# to_ms converts wrk's latency figures (us, ms, s) to milliseconds.
to_ms() { awk -v v="$1" 'BEGIN { n=v+0; if (v ~ /us$/) n/=1000; else if (v ~ /ms$/) n=n; else if (v ~ /s$/) n*=1000; printf "%.3f", n }'; }
last() { awk '{print $NF}' <<<"$1"; }

# CPU per request of each proxy (user + system, from /proc, all threads; nginx: its workers).
declare -A procs=([switchyard]="$sw_pid" [nginx]="$(pgrep -P "$nginx_pid" | tr '\n' ' ')" [haproxy]="$haproxy_pid")
tick=$(getconf CLK_TCK)
cpu_ticks() { local t=0 f; for p in "$@"; do for f in /proc/"$p"/task/*/stat; do t=$((t + $(awk '{print $14+$15}' "$f" 2>/dev/null || echo 0))); done; done; echo "$t"; }

# Warm each proxy's upstream pool so the first round does not pay for connection setup.
for n in "${names[@]}"; do
  out=$(wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:${port[$n]}/tracking" 2>&1) || bench_fail "warm-up $n: wrk failed: $out"
  check_wrk "warm-up $n" "$out"
done

# Figures, one list per cell and proxy: "<cell>/<proxy>" -> space-separated values, one a round.
declare -A rps p50 p99 cpu mean tlsparams
# measure CELL ROUND NAME runs one round of CELL against proxy NAME, checks it and records it.
measure() {
  local cell=$1 r=$2 n=$3 what="round $2 $1 $3" out t0 t1 v
  case $cell in
  h1|tls)
    local url="http://127.0.0.1:${port[$n]}/tracking?no=1"
    [ "$cell" = tls ] && url="https://127.0.0.1:${tlsport[$n]}/tracking?no=1"
    t0=$(cpu_ticks ${procs[$n]})
    out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$url" 2>&1) || bench_fail "$what: wrk failed: $out"
    t1=$(cpu_ticks ${procs[$n]})
    check_wrk "$what" "$out"
    v=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    p50[$cell/$n]="${p50[$cell/$n]:-} $(to_ms "$(awk '$1=="50%" {print $2}' <<<"$out")")"
    p99[$cell/$n]="${p99[$cell/$n]:-} $(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")"
    cpu[$cell/$n]="${cpu[$cell/$n]:-} $(awk -v d=$((t1 - t0)) -v t="$tick" -v r="$v" -v s="$DURATION" 'BEGIN { printf "%.1f", d / t / (r * s) * 1e6 }')"
    printf "  round %d %-6s %-10s %10.0f req/s  p50 %7s ms  p99 %7s ms  cpu %6s us/req\n" "$r" "$cell" "$n" "$v" \
      "$(last "${p50[$cell/$n]}")" "$(last "${p99[$cell/$n]}")" "$(last "${cpu[$cell/$n]}")" ;;
  h2c|h2tls)
    local url="http://127.0.0.1:${h2port[$n]}/tracking?no=1" proto=h2c
    [ "$cell" = h2tls ] && url="https://127.0.0.1:${tlsport[$n]}/tracking?no=1" proto=h2
    out=$(h2load -c16 -m10 -t"$THREADS" -D"$DURATION" "$url" 2>&1) || bench_fail "$what: h2load exited non-zero: $out"
    check_h2load "$what" "$out" "$proto"
    v=$(awk '/^finished in/ {print $4}' <<<"$out")
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    mean[$cell/$n]="${mean[$cell/$n]:-} $(to_ms "$(awk '/^time for request:/ {print $6}' <<<"$out")")"
    [ "$cell" = h2tls ] && tlsparams[$cell/$n]=$(grep -E '^(TLS Protocol|Cipher|Server Temp Key):' <<<"$out" | awk '{print $NF == "bits" ? $(NF-2) : $NF}' | tr '\n' ' ')
    printf "  round %d %-6s %-10s %10.0f req/s  mean %7s ms\n" "$r" "$cell" "$n" "$v" "$(last "${mean[$cell/$n]}")" ;;
  tlscps)
    out=$("$work/tlsload" -addr "127.0.0.1:${tlsport[$n]}" -path "/tracking?no=1" -c 16 -d "${DURATION}s" 2>&1) ||
      bench_fail "$what: $out"
    v=$(grep -o 'cps=[0-9.]*' <<<"$out" | cut -d= -f2)
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    tlsparams[$cell/$n]=$(grep -o 'version=[^ ]* cipher=[^ ]* group=[^ ]* cert=[^ ]*' <<<"$out")
    printf "  round %d %-6s %-10s %10.0f handshakes/s  %s (%s, none resumed)\n" "$r" "$cell" "$n" "$v" \
      "$(grep -o 'handshakes=[0-9]*' <<<"$out")" "${tlsparams[$cell/$n]}" ;;
  esac
}

echo "L7 benchmark: wrk -t$THREADS -c$CONNS -d${DURATION}s; h2load -c16 -m10 -t$THREADS -D$DURATION; tlsload -c16; $ROUNDS rounds alternating; same nginx backend, loopback, $(nproc) cores$(is_smoke && echo ' (smoke)')"
for cell in h1 h2c tls tlscps h2tls; do
  for r in $(seq "$ROUNDS"); do
    # Rotate the order every round so no proxy always runs first or last.
    order=("${names[@]:$(( (r-1) % 3 ))}" "${names[@]:0:$(( (r-1) % 3 ))}")
    for n in "${order[@]}"; do measure "$cell" "$r" "$n"; done
  done
done

# The TLS parameters must be the same for every proxy, or the TLS cells compare different work.
for cell in tlscps h2tls; do
  for n in nginx haproxy; do
    [ "${tlsparams[$cell/$n]}" = "${tlsparams[$cell/switchyard]}" ] ||
      bench_fail "$cell: $n negotiated '${tlsparams[$cell/$n]}', switchyard '${tlsparams[$cell/switchyard]}': the proxies' TLS settings differ"
  done
done

# median of a list of numbers
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{a[NR]=$1} END { if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a/b }'; }
declare -A M
for n in "${names[@]}"; do
  for k in h1 h2c tls tlscps h2tls; do M[rps/$k/$n]=$(median "${rps[$k/$n]}"); done
  for k in h1 tls; do M[p50/$k/$n]=$(median "${p50[$k/$n]}"); M[p99/$k/$n]=$(median "${p99[$k/$n]}"); M[cpu/$k/$n]=$(median "${cpu[$k/$n]}"); done
  for k in h2c h2tls; do M[mean/$k/$n]=$(median "${mean[$k/$n]}"); done
done

echo
echo "median of $ROUNDS rounds"
printf "%-7s %-12s %12s %10s %10s %14s %16s %12s\n" cell proxy "req/s" "p50 ms" "p99 ms" "rps vs nginx" "rps vs haproxy" "cpu us/req"
for k in h1 tls; do
  for n in "${names[@]}"; do
    printf "%-7s %-12s %12.0f %10s %10s %14s %16s %12s\n" "$k" "$n" "${M[rps/$k/$n]}" "${M[p50/$k/$n]}" "${M[p99/$k/$n]}" \
      "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/nginx]}")" "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/haproxy]}")" "${M[cpu/$k/$n]}"
  done
done
printf "%-7s %-12s %12s %10s %14s %16s\n" cell proxy "req/s" "mean ms" "rps vs nginx" "rps vs haproxy"
for k in h2c h2tls; do
  for n in "${names[@]}"; do
    printf "%-7s %-12s %12.0f %10s %14s %16s\n" "$k" "$n" "${M[rps/$k/$n]}" "${M[mean/$k/$n]}" \
      "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/nginx]}")" "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/haproxy]}")"
  done
done
printf "%-7s %-12s %12s %14s %16s\n" cell proxy "handshakes/s" "vs nginx" "vs haproxy"
for n in "${names[@]}"; do
  printf "%-7s %-12s %12.0f %14s %16s\n" tlscps "$n" "${M[rps/tlscps/$n]}" "$(ratio "${M[rps/tlscps/$n]}" "${M[rps/tlscps/nginx]}")" "$(ratio "${M[rps/tlscps/$n]}" "${M[rps/tlscps/haproxy]}")"
done
echo "TLS for every proxy: ${tlsparams[tlscps/switchyard]} (h2load: ${tlsparams[h2tls/switchyard]})"

# The flat JSON: the keys of earlier runs unchanged, the TLS cells added.
json="{"
add() { json="$json\"$1\": $2, "; }
for n in "${names[@]}"; do
  add "${n}_rps" "${M[rps/h1/$n]}"; add "${n}_p50_ms" "${M[p50/h1/$n]}"; add "${n}_p99_ms" "${M[p99/h1/$n]}"
  add "h2_${n}_rps" "${M[rps/h2c/$n]}"; add "h2_${n}_mean_ms" "${M[mean/h2c/$n]}"
  add "${n}_cpu_us_per_req" "${M[cpu/h1/$n]}"
  add "${n}_tls_rps" "${M[rps/tls/$n]}"; add "${n}_tls_p50_ms" "${M[p50/tls/$n]}"; add "${n}_tls_p99_ms" "${M[p99/tls/$n]}"
  add "${n}_tls_cpu_us_per_req" "${M[cpu/tls/$n]}"
  add "${n}_tls_cps" "${M[rps/tlscps/$n]}"
  add "${n}_h2tls_rps" "${M[rps/h2tls/$n]}"; add "${n}_h2tls_mean_ms" "${M[mean/h2tls/$n]}"
done
add ratio_vs_nginx "$(ratio "${M[rps/h1/switchyard]}" "${M[rps/h1/nginx]}")"
add ratio_vs_haproxy "$(ratio "${M[rps/h1/switchyard]}" "${M[rps/h1/haproxy]}")"
add p99_ratio_vs_nginx "$(ratio "${M[p99/h1/switchyard]}" "${M[p99/h1/nginx]}")"
add h2_ratio_vs_nginx "$(ratio "${M[rps/h2c/switchyard]}" "${M[rps/h2c/nginx]}")"
add h2_ratio_vs_haproxy "$(ratio "${M[rps/h2c/switchyard]}" "${M[rps/h2c/haproxy]}")"
add cpu_ratio_vs_nginx "$(ratio "${M[cpu/h1/switchyard]}" "${M[cpu/h1/nginx]}")"
add tls_ratio_vs_nginx "$(ratio "${M[rps/tls/switchyard]}" "${M[rps/tls/nginx]}")"
add tls_ratio_vs_haproxy "$(ratio "${M[rps/tls/switchyard]}" "${M[rps/tls/haproxy]}")"
add tls_cps_ratio_vs_nginx "$(ratio "${M[rps/tlscps/switchyard]}" "${M[rps/tlscps/nginx]}")"
add tls_cps_ratio_vs_haproxy "$(ratio "${M[rps/tlscps/switchyard]}" "${M[rps/tlscps/haproxy]}")"
add h2tls_ratio_vs_nginx "$(ratio "${M[rps/h2tls/switchyard]}" "${M[rps/h2tls/nginx]}")"
add h2tls_ratio_vs_haproxy "$(ratio "${M[rps/h2tls/switchyard]}" "${M[rps/h2tls/haproxy]}")"
read -r tv tc tg tcert <<<"$(sed 's/[a-z]*=//g' <<<"${tlsparams[tlscps/switchyard]}")"
add tls_version "\"$tv\""; add tls_cipher "\"$tc\""; add tls_group "\"$tg\""; add tls_cert "\"${tcert//_/ }\""
add rounds "$ROUNDS"; add duration_s "$DURATION"; add connections "$CONNS"; add cores "$(nproc)"
json="$json\"smoke\": $(smoke_json)}"
write_json bench/out/l7.json <<<"$json"
