#!/usr/bin/env bash
# bench/l7.sh — switchyard's L7 proxy against HAProxy (HTTP mode) and nginx (reverse proxy), all
# three in front of the same nginx backend on loopback, in one run, several rounds alternating.
# Cells, each measured in its own alternating rounds:
#   h1     wrk over persistent HTTP/1.1 connections (plus each proxy's CPU per request, from /proc);
#   h1pin  the same with each proxy pinned to CPU 0 (taskset, all its threads) and wrk and the
#          backend to the other CPUs, so the figure is the proxy's own cost, not the share of the
#          loopback's two cores it won;
#   h2c    h2load over h2c (prior knowledge);
#   tls    wrk over persistent TLS 1.3 HTTP/1.1 connections;
#   tlscps full TLS 1.3 handshakes per second (bench/tlsload: a new connection per request, no
#          session cache; every handshake counted and checked not resumed);
#   h2tls  h2load over TLS 1.3 with ALPN h2;
#   policy wrk to a route with request policy: a 90/10 weighted split over two pools (the same
#          backend on two ports) with a request header set and a response header set (nginx:
#          upstream weights + proxy_set_header/add_header; HAProxy: server weights +
#          http-request/http-response set-header); its JSON compares switchyard with its own plain
#          route (h1) of the same run;
#   gzip   wrk with Accept-Encoding: gzip for a 20 KB JSON body, each proxy compressing it at
#          gzip level GZIP_LEVEL (5; HAProxy: tune.comp.maxlevel), streamed;
#   grpc   unary gRPC calls per second (bench/grpcload on grpc-go: 16 connections x 10 calls in
#          flight, 64-byte requests, 512-byte answers; every call must end with status OK and the
#          full payload) through each proxy's h2c listener (switchyard: an h2c pool; HAProxy:
#          proto h2 both sides; nginx: grpc_pass) to one grpc-go backend (bench/grpcbackend, the
#          interop TestService), plus each proxy's CPU per call. switchyard's gRPC listener is a
#          second `l7 run` process (GOMAXPROCS=2) so the other cells' proxy is unchanged.
# HTTP/1.1 upstream everywhere; each proxy keeps a pool of upstream keep-alive connections and
# writes no access log. Each proxy gets the same CPU budget (2 workers/threads/GOMAXPROCS). TLS:
# one ECDSA P-256 certificate made at run time with openssl, TLS 1.2-1.3 offered, the TLS 1.3
# suites in the same order (AES-128-GCM first, which Go's server picks on AES hardware), X25519;
# the run fails unless every proxy negotiated the same version, suite and group.
# Every round is checked (bench/lib.sh): a non-2xx answer, a socket error, a timeout or a peer
# that did not start fails the run, and then no JSON is written.
# Prints tables and writes a flat JSON object to bench/out/l7.json. Tunables (environment):
# ROUNDS (3), DURATION seconds per run (5), CONNS (64), THREADS (2); CELLS (all nine: "h1 h1pin
# h2c tls tlscps h2tls grpc policy gzip"; a subset is for profiling and writes no JSON); BENCH_SMOKE=1: one round of
# 1 s per cell. Profiling (h1 and tls cells): SYSCALLS=1 counts each proxy's system calls per
# request by kind (perf stat on the syscall tracepoints) and prints them after each round;
# PERF_DIR=dir records a CPU profile of each proxy per round (perf record -g) into dir. Wrap in the shared lock, e.g. flock /tmp/switchyard-bench.lock bash bench/l7.sh
# BENCH_L7_BACKEND_STATUS (200) is the status the backend answers, BENCH_L7_GRPC_CODE (0: OK) the
# gRPC status the gRPC backend answers: ways to see the checks fail.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=l7
. bench/lib.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
CELLS=${CELLS:-h1 h1pin h2c tls tlscps h2tls grpc policy gzip}
GZIP_LEVEL=${GZIP_LEVEL:-5}
if is_smoke; then ROUNDS=1 DURATION=1; fi
BACKEND_STATUS=${BENCH_L7_BACKEND_STATUS:-200}
GRPC_CODE=${BENCH_L7_GRPC_CODE:-0}
# grpcload's connections x calls in flight, and the payloads (request, answer) in bytes.
GRPC_CONNS=16 GRPC_STREAMS=10 GRPC_REQ=64 GRPC_RESP=512
BACKEND_PORT=18180 SW_PORT=18181 NGINX_PORT=18182 HAPROXY_PORT=18183 SW_TLS_PORT=18184
NGINX_H2_PORT=18185 HAPROXY_H2_PORT=18186 NGINX_TLS_PORT=18187 HAPROXY_TLS_PORT=18188
GRPC_BACKEND_PORT=18210 SW_GRPC_PORT=18211 NGINX_GRPC_PORT=18212 HAPROXY_GRPC_PORT=18213
BACKEND2_PORT=18214

ensure_packages wrk nginx haproxy nghttp2-client curl openssl procps util-linux
if [[ " $CELLS " == *" h1pin "* ]] && [ "$(nproc)" -lt 2 ]; then
  bench_fail "the h1pin cell pins the proxy and the load to different CPUs and this machine has one: leave h1pin out of CELLS"
fi
[ -x bin/switchyard ] || go build -o bin/switchyard ./cmd/switchyard
ports_free $BACKEND_PORT $BACKEND2_PORT $SW_PORT $NGINX_PORT $HAPROXY_PORT $SW_TLS_PORT $NGINX_H2_PORT $HAPROXY_H2_PORT $NGINX_TLS_PORT $HAPROXY_TLS_PORT \
  $GRPC_BACKEND_PORT $SW_GRPC_PORT $NGINX_GRPC_PORT $HAPROXY_GRPC_PORT

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
go build -o "$work/grpcbackend" ./bench/grpcbackend
go build -o "$work/grpcload" ./bench/grpcload

# One ECDSA P-256 certificate for all three proxies, made for this run.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench.test \
  -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat "$work/cert.pem" "$work/key.pem" >"$work/haproxy.pem"
# The TLS 1.3 suites in one order for the OpenSSL proxies, the order Go's server uses on AES
# hardware (it does not let it be configured); each server picks by its own order.
SUITES=TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256

write_big_json "$work/big.json" # the gzip cell's body
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
    listen 127.0.0.1:$BACKEND2_PORT;
    location / { default_type application/json; return $BACKEND_STATUS '{"state":"at transfer hub","zone":"35","step":4}'; }
    location = /big.json { default_type application/json; alias $work/big.json; }
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
  upstream split { server 127.0.0.1:$BACKEND_PORT weight=9; server 127.0.0.1:$BACKEND2_PORT weight=1; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    gzip on; gzip_comp_level $GZIP_LEVEL; gzip_types application/json; gzip_min_length 256; gzip_proxied any;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
    location /policy/ {
      proxy_pass http://split;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Env prod;
      add_header X-Route policy;
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
  # gRPC: h2c from the client, HTTP/2 to the gRPC backend (one upstream connection per call in
  # flight, kept alive).
  upstream grpcapp { server 127.0.0.1:$GRPC_BACKEND_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX_GRPC_PORT http2;
    location / { grpc_pass grpc://grpcapp; }
  }
}
CONF

cat >"$work/haproxy.cfg" <<CONF
global
  nbthread 2
  maxconn 3000
  tune.comp.maxlevel $GZIP_LEVEL
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
  use_backend be_split if { path_beg /policy/ }
  default_backend be
frontend fe_h2
  bind 127.0.0.1:$HAPROXY_H2_PORT proto h2
  default_backend be
frontend fe_tls
  bind 127.0.0.1:$HAPROXY_TLS_PORT ssl crt $work/haproxy.pem alpn h2,http/1.1
  default_backend be
backend be
  compression algo gzip
  compression type application/json
  server app 127.0.0.1:$BACKEND_PORT maxconn 2000
backend be_split
  http-request set-header X-Env prod
  http-response set-header X-Route policy
  server a 127.0.0.1:$BACKEND_PORT maxconn 2000 weight 90
  server b 127.0.0.1:$BACKEND2_PORT maxconn 2000 weight 10
frontend fe_grpc
  bind 127.0.0.1:$HAPROXY_GRPC_PORT proto h2
  default_backend be_grpc
backend be_grpc
  server grpc 127.0.0.1:$GRPC_BACKEND_PORT proto h2 maxconn 2000
CONF

cat >"$work/l7.yaml" <<CONF
listeners:
  - {address: "127.0.0.1:$SW_PORT", h2c: true}
  - {address: "127.0.0.1:$SW_TLS_PORT", tls: {certificates: [{cert: "$work/cert.pem", key: "$work/key.pem"}]}}
access_log: "off"
limits: {max_in_flight: 20000}
routes:
  - name: policy
    match: {path: {prefix: /policy/}}
    pools: [{pool: app, weight: 90}, {pool: app2, weight: 10}]
    filters:
      request_headers: {set: [{name: X-Env, value: prod}]}
      response_headers: {set: [{name: X-Route, value: policy}]}
  - name: gzip
    match: {path: {exact: /big.json}}
    pool: app
    compress: {encodings: [gzip], types: [application/json], levels: {gzip: $GZIP_LEVEL}}
  - {name: all, pool: app}
pools:
  - {name: app, balance: round_robin, backends: [{address: "127.0.0.1:$BACKEND_PORT"}]}
  - {name: app2, balance: round_robin, backends: [{address: "127.0.0.1:$BACKEND2_PORT"}]}
CONF
# switchyard's gRPC proxy: an h2c listener to an h2c pool, in a process of its own.
cat >"$work/l7-grpc.yaml" <<CONF
listeners:
  - {address: "127.0.0.1:$SW_GRPC_PORT", h2c: true}
access_log: "off"
limits: {max_in_flight: 20000}
routes: [{name: grpc, pool: grpc}]
pools: [{name: grpc, protocol: h2c, balance: round_robin, backends: [{address: "127.0.0.1:$GRPC_BACKEND_PORT"}]}]
CONF

# Same CPU budget for each proxy: nginx 2 workers, HAProxy 2 threads, switchyard GOMAXPROCS=2.
nginx -c "$work/backend.conf" & pids+=($!)
nginx -c "$work/nginx.conf" & pids+=($!); nginx_pid=$!
haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 & pids+=($!); haproxy_pid=$!
GOMAXPROCS=2 ./bin/switchyard l7 run --config "$work/l7.yaml" --log-level warn 2>"$work/l7.log" & pids+=($!); sw_pid=$!
# The gRPC backend (grpc-go, GOMAXPROCS at its default) and switchyard's gRPC proxy.
"$work/grpcbackend" -listen 127.0.0.1:$GRPC_BACKEND_PORT -code "$GRPC_CODE" 2>"$work/grpcbackend.log" & pids+=($!)
GOMAXPROCS=2 ./bin/switchyard l7 run --config "$work/l7-grpc.yaml" --log-level warn 2>"$work/l7-grpc.log" & pids+=($!); sw_grpc_pid=$!

names=(switchyard nginx haproxy)
declare -A port=([switchyard]=$SW_PORT [nginx]=$NGINX_PORT [haproxy]=$HAPROXY_PORT)
declare -A h2port=([switchyard]=$SW_PORT [nginx]=$NGINX_H2_PORT [haproxy]=$HAPROXY_H2_PORT)
declare -A tlsport=([switchyard]=$SW_TLS_PORT [nginx]=$NGINX_TLS_PORT [haproxy]=$HAPROXY_TLS_PORT)
declare -A grpcport=([switchyard]=$SW_GRPC_PORT [nginx]=$NGINX_GRPC_PORT [haproxy]=$HAPROXY_GRPC_PORT)

# Every peer answers 200 on every listener the rounds use before they start.
http_ready "the nginx backend" "http://127.0.0.1:$BACKEND_PORT/tracking"
h2c_200() { local s; s=$(curl -s --http2-prior-knowledge -o /dev/null -w "%{http_code} HTTP/%{http_version}" --max-time 2 "$1") || true; [ "$s" = "200 HTTP/2" ] || { echo "answered ${s:-nothing}"; return 1; }; }
h2tls_200() { local s; s=$(curl -sk --http2 -o /dev/null -w "%{http_code} HTTP/%{http_version}" --max-time 2 "$1") || true; [ "$s" = "200 HTTP/2" ] || { echo "answered ${s:-nothing}"; return 1; }; }
# policy_ok URL: 200 with the policy route's response header; gzip_ok URL: a gzip body that
# decodes to the backend's 20 KB.
policy_ok() { curl -sf -o /dev/null -D - --max-time 2 "$1" | grep -qi '^X-Route: policy' || { echo "no X-Route: policy"; return 1; }; }
gzip_ok() {
  local ce; ce=$(curl -sf -H 'Accept-Encoding: gzip' -o "$work/gz.out" -w '%{content_type}' -D "$work/gz.head" --max-time 2 "$1") || { echo "no 200"; return 1; }
  grep -qi '^Content-Encoding: gzip' "$work/gz.head" || { echo "not gzip-encoded"; return 1; }
  gunzip -c "$work/gz.out" | cmp -s - "$work/big.json" || { echo "does not decode to the backend's body"; return 1; }
}
# grpc_ok ADDR succeeds when one unary call through ADDR ends OK with the whole payload.
grpc_ok() { "$work/grpcload" -addr "$1" -c 1 -m 1 -n 1 -d 2s -timeout 2s -req "$GRPC_REQ" -resp "$GRPC_RESP" 2>&1; }
ready "the gRPC backend" 10 grpc_ok "127.0.0.1:$GRPC_BACKEND_PORT"
for n in "${names[@]}"; do
  http_ready "$n (HTTP/1.1)" "http://127.0.0.1:${port[$n]}/tracking"
  ready "$n (h2c)" 10 h2c_200 "http://127.0.0.1:${h2port[$n]}/tracking"
  http_ready "$n (TLS, HTTP/1.1)" "https://127.0.0.1:${tlsport[$n]}/tracking"
  ready "$n (TLS, h2)" 10 h2tls_200 "https://127.0.0.1:${tlsport[$n]}/tracking"
  ready "$n (gRPC)" 10 grpc_ok "127.0.0.1:${grpcport[$n]}"
  ready "$n (policy route)" 10 policy_ok "http://127.0.0.1:${port[$n]}/policy/tracking"
  ready "$n (gzip)" 10 gzip_ok "http://127.0.0.1:${port[$n]}/big.json"
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

# CPU per request (user + system, from /proc, all threads) of each proxy (nginx: its workers),
# of the backend's worker and of wrk itself, and how busy the whole machine was: on 2 cores the
# load generator, the proxy and the backend share the CPUs, so the proxy's req/s is bounded by
# the sum of the three processes' CPU per request, not by the proxy's alone (docs/l7.md).
declare -A procs=([switchyard]="$sw_pid" [nginx]="$(pgrep -P "$nginx_pid" | tr '\n' ' ')" [haproxy]="$haproxy_pid")
# The gRPC cell's proxies: switchyard's second process; nginx and HAProxy serve it in the same ones.
declare -A grpcprocs=([switchyard]="$sw_grpc_pid" [nginx]="${procs[nginx]}" [haproxy]="$haproxy_pid")
backend_procs="$(pgrep -P "${pids[0]}" | tr '\n' ' ')"
tick=$(getconf CLK_TCK)
# cpu_ticks PID... (bench/lib.sh) sums utime + stime of the processes.
# Profiling hooks around one round (SYSCALLS, PERF_DIR; see the header).
SYSCALL_EVENTS=read,write,readv,writev,recvfrom,sendto,recvmsg,sendmsg,epoll_wait,epoll_pwait,epoll_ctl,futex,accept4,close,getsockopt,setsockopt,nanosleep,sched_yield,getpid,tgkill,rt_sigreturn
prof_pids=()
prof_start() {
  local tag=$1 pids=$2
  prof_pids=()
  if [ "${SYSCALLS:-0}" = 1 ]; then
    perf stat -x, -o "$work/$tag.syscalls" -e "raw_syscalls:sys_enter,$(sed 's/\([a-z_0-9]*\)/syscalls:sys_enter_\1/g' <<<"$SYSCALL_EVENTS")" \
      -p "${pids// /,}" 2>/dev/null & prof_pids+=($!)
  fi
  if [ -n "${PERF_DIR:-}" ]; then
    mkdir -p "$PERF_DIR"
    perf record -q -F 499 -g -o "$PERF_DIR/$tag.data" -p "${pids// /,}" 2>/dev/null & prof_pids+=($!)
  fi
  [ ${#prof_pids[@]} -eq 0 ] || sleep 0.2 # let perf attach before the load starts
  segs0=$(tcp_out_segs) ctx0=$(ctx_switches $pids) rq0=$(runq_wait_ns $pids)
}
# ctx_switches PID... prints the voluntary and involuntary context switches of the processes'
# threads so far.
ctx_switches() {
  local p
  for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null; done |
    awk '/^voluntary_ctxt_switches/ { v += $2 } /^nonvoluntary_ctxt_switches/ { n += $2 } END { print v + 0, n + 0 }'
}
# runq_wait_ns PID... prints the nanoseconds the processes' threads spent runnable but waiting
# for a CPU so far (schedstat's second field).
runq_wait_ns() {
  local p
  for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done | awk '{ w += $2 } END { printf "%.0f\n", w }'
}
# tcp_out_segs prints the machine's TCP segments sent so far (all of loopback's, both directions).
tcp_out_segs() { awk '$1 == "Tcp:" && $2 ~ /^[0-9]/ { print $12 }' /proc/net/snmp; }
# prof_stop TAG RPS stops the hooks and prints the system calls per request by kind.
prof_stop() {
  local tag=$1 v=$2 pids=$3 p segs1 ctx1 rq1
  segs1=$(tcp_out_segs) ctx1=$(ctx_switches $pids) rq1=$(runq_wait_ns $pids)
  for p in "${prof_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -f "$work/$tag.syscalls" ] || return 0
  awk -v d=$((segs1 - segs0)) -v r="$v" -v s="$DURATION" 'BEGIN { printf "      TCP segments per request (whole machine): %.2f", d / (r * s) }'
  awk -v a="$ctx0" -v b="$ctx1" -v r="$v" -v s="$DURATION" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "; proxy context switches per request: %.2f voluntary, %.2f involuntary", (y[1] - x[1]) / (r * s), (y[2] - x[2]) / (r * s) }'
  awk -v d=$((rq1 - rq0)) -v r="$v" -v s="$DURATION" 'BEGIN { printf "; proxy threads waiting for a CPU: %.1f us per request\n", d / 1e3 / (r * s) }'
  awk -F, -v n="$(awk -v r="$v" -v s="$DURATION" 'BEGIN { print r * s }')" '
    $3 ~ /sys_enter/ && $1 + 0 > 0 { k = $3; sub(/.*sys_enter_?/, "", k); if (k == "") k = "all"; printf "%s %.2f  ", k, $1 / n }
    END { print "" }' "$work/$tag.syscalls" | sed 's/^/      syscalls per request: /'
  rm -f "$work/$tag.syscalls"
}
# box_ticks prints the machine's busy and total CPU ticks (all cores) from /proc/stat; time the
# hypervisor took (steal) counts as neither.
box_ticks() { awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8; print busy, busy + $5 + $6 }' /proc/stat; }
# per_req TICKS RPS prints CPU microseconds per request for TICKS spent over one round.
per_req() { awk -v d="$1" -v t="$tick" -v r="$2" -v s="$DURATION" 'BEGIN { printf "%.1f", d / t / (r * s) * 1e6 }'; }

# Warm each proxy's upstream pool so the first round does not pay for connection setup.
for n in "${names[@]}"; do
  out=$(wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:${port[$n]}/tracking" 2>&1) || bench_fail "warm-up $n: wrk failed: $out"
  check_wrk "warm-up $n" "$out"
done

# pin CPUS PID... sets the CPU affinity of every thread of the processes.
pin() {
  local cpus=$1 p
  shift
  for p in "$@"; do taskset -a -p -c "$cpus" "$p" >/dev/null || bench_fail "taskset -a -p -c $cpus $p failed"; done
}
all_cpus="0-$(( $(nproc) - 1 ))" rest_cpus="1-$(( $(nproc) - 1 ))"

# Figures, one list per cell and proxy: "<cell>/<proxy>" -> space-separated values, one a round.
declare -A rps p50 p99 cpu bcpu wcpu busy mean tlsparams
# measure CELL ROUND NAME runs one round of CELL against proxy NAME, checks it and records it.
measure() {
  local cell=$1 r=$2 n=$3 what="round $2 $1 $3" out t0 t1 v
  case $cell in
  h1|h1pin|tls|policy|gzip)
    local url="http://127.0.0.1:${port[$n]}/tracking?no=1" wrkcpus=$all_cpus hdr=()
    [ "$cell" = tls ] && url="https://127.0.0.1:${tlsport[$n]}/tracking?no=1"
    [ "$cell" = policy ] && url="http://127.0.0.1:${port[$n]}/policy/tracking?no=1"
    [ "$cell" = gzip ] && url="http://127.0.0.1:${port[$n]}/big.json" hdr=(-H "Accept-Encoding: gzip")
    local b0 b1 bx0 bx1 w
    if [ "$cell" = h1pin ]; then
      pin 0 ${procs[$n]}
      pin "$rest_cpus" $backend_procs
      wrkcpus=$rest_cpus
    fi
    prof_start "$cell-$n-$r" "${procs[$n]}"
    t0=$(cpu_ticks ${procs[$n]}) b0=$(cpu_ticks $backend_procs) bx0=$(box_ticks)
    # wrk's own CPU: the subshell's reaped-children ticks (cutime + cstime) once wrk has exited.
    out=$(taskset -c "$wrkcpus" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "${hdr[@]}" "$url" 2>&1 || echo "WRK FAILED"
      awk '{ print "wrk-ticks", $16 + $17 }' /proc/$BASHPID/stat)
    [ "$cell" != h1pin ] || pin "$all_cpus" ${procs[$n]} $backend_procs
    t1=$(cpu_ticks ${procs[$n]}) b1=$(cpu_ticks $backend_procs) bx1=$(box_ticks)
    ! grep -q '^WRK FAILED' <<<"$out" || bench_fail "$what: wrk failed: $out"
    check_wrk "$what" "$out"
    v=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    w=$(awk '/^wrk-ticks/ {print $2}' <<<"$out")
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    p50[$cell/$n]="${p50[$cell/$n]:-} $(to_ms "$(awk '$1=="50%" {print $2}' <<<"$out")")"
    p99[$cell/$n]="${p99[$cell/$n]:-} $(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")"
    cpu[$cell/$n]="${cpu[$cell/$n]:-} $(per_req $((t1 - t0)) "$v")"
    bcpu[$cell/$n]="${bcpu[$cell/$n]:-} $(per_req $((b1 - b0)) "$v")"
    wcpu[$cell/$n]="${wcpu[$cell/$n]:-} $(per_req "$w" "$v")"
    busy[$cell/$n]="${busy[$cell/$n]:-} $(awk -v a="$bx0" -v b="$bx1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.3f", (y[1] - x[1]) / (y[2] - x[2]) }')"
    # bench: the share of the machine the three processes used (the rest of "busy" is other work).
    printf "  round %d %-6s %-10s %10.0f req/s  p50 %7s ms  p99 %7s ms  cpu us/req: proxy %6s backend %5s wrk %5s  busy %s bench %s\n" "$r" "$cell" "$n" "$v" \
      "$(last "${p50[$cell/$n]}")" "$(last "${p99[$cell/$n]}")" "$(last "${cpu[$cell/$n]}")" \
      "$(last "${bcpu[$cell/$n]}")" "$(last "${wcpu[$cell/$n]}")" "$(last "${busy[$cell/$n]}")" \
      "$(awk -v a="$(last "${cpu[$cell/$n]}")" -v b="$(last "${bcpu[$cell/$n]}")" -v c="$(last "${wcpu[$cell/$n]}")" -v r="$v" -v k="$(nproc)" 'BEGIN { printf "%.3f", (a + b + c) * r / 1e6 / k }')"
    prof_stop "$cell-$n-$r" "$v" "${procs[$n]}" ;;
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
    prof_start "$cell-$n-$r" "${procs[$n]}"
    t0=$(cpu_ticks ${procs[$n]})
    out=$("$work/tlsload" -addr "127.0.0.1:${tlsport[$n]}" -path "/tracking?no=1" -c 16 -d "${DURATION}s" 2>&1) ||
      bench_fail "$what: $out"
    t1=$(cpu_ticks ${procs[$n]})
    v=$(grep -o 'cps=[0-9.]*' <<<"$out" | cut -d= -f2)
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    cpu[$cell/$n]="${cpu[$cell/$n]:-} $(per_req $((t1 - t0)) "$v")"
    tlsparams[$cell/$n]=$(grep -o 'version=[^ ]* cipher=[^ ]* group=[^ ]* cert=[^ ]*' <<<"$out")
    printf "  round %d %-6s %-10s %10.0f handshakes/s  %s (%s, none resumed)  proxy cpu %s us/handshake\n" "$r" "$cell" "$n" "$v" \
      "$(grep -o 'handshakes=[0-9]*' <<<"$out")" "${tlsparams[$cell/$n]}" "$(last "${cpu[$cell/$n]}")"
    prof_stop "$cell-$n-$r" "$v" "${procs[$n]}" ;;
  grpc)
    t0=$(cpu_ticks ${grpcprocs[$n]})
    out=$("$work/grpcload" -addr "127.0.0.1:${grpcport[$n]}" -c "$GRPC_CONNS" -m "$GRPC_STREAMS" -d "${DURATION}s" \
      -req "$GRPC_REQ" -resp "$GRPC_RESP" 2>&1) || bench_fail "$what: $out"
    t1=$(cpu_ticks ${grpcprocs[$n]})
    check_loadgen "$what" "$out"
    v=$(kv rps "$out")
    rps[$cell/$n]="${rps[$cell/$n]:-} $v"
    p50[$cell/$n]="${p50[$cell/$n]:-} $(kv p50_ms "$out")"
    p99[$cell/$n]="${p99[$cell/$n]:-} $(kv p99_ms "$out")"
    cpu[$cell/$n]="${cpu[$cell/$n]:-} $(us_per $((t1 - t0)) "$(kv ok "$out")")"
    printf "  round %d %-6s %-10s %10.0f calls/s  p50 %7s ms  p99 %7s ms  proxy cpu %s us/call (%s calls, all OK)\n" "$r" "$cell" "$n" "$v" \
      "$(last "${p50[$cell/$n]}")" "$(last "${p99[$cell/$n]}")" "$(last "${cpu[$cell/$n]}")" "$(kv ok "$out")" ;;
  esac
}

echo "L7 benchmark: wrk -t$THREADS -c$CONNS -d${DURATION}s; h2load -c16 -m10 -t$THREADS -D$DURATION; tlsload -c16; grpcload -c$GRPC_CONNS -m$GRPC_STREAMS; $ROUNDS rounds alternating; same nginx backend (grpc-go backend for grpc), loopback, $(nproc) cores$(is_smoke && echo ' (smoke)')"
for cell in $CELLS; do
  for r in $(seq "$ROUNDS"); do
    # Rotate the order every round so no proxy always runs first or last.
    order=("${names[@]:$(( (r-1) % 3 ))}" "${names[@]:0:$(( (r-1) % 3 ))}")
    for n in "${order[@]}"; do measure "$cell" "$r" "$n"; done
  done
done

# ran CELL is true when CELL was measured in this run (CELLS).
ran() { [[ " $CELLS " == *" $1 "* ]]; }

# The TLS parameters must be the same for every proxy, or the TLS cells compare different work.
for cell in tlscps h2tls; do
  ran "$cell" || continue
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
  for k in $CELLS; do M[rps/$k/$n]=$(median "${rps[$k/$n]}"); done
  for k in h1 h1pin tls policy gzip; do
    ran "$k" || continue
    M[p50/$k/$n]=$(median "${p50[$k/$n]}"); M[p99/$k/$n]=$(median "${p99[$k/$n]}"); M[cpu/$k/$n]=$(median "${cpu[$k/$n]}")
    M[bcpu/$k/$n]=$(median "${bcpu[$k/$n]}"); M[wcpu/$k/$n]=$(median "${wcpu[$k/$n]}"); M[busy/$k/$n]=$(median "${busy[$k/$n]}")
  done
  for k in h2c h2tls; do ran "$k" && M[mean/$k/$n]=$(median "${mean[$k/$n]}"); done
  ran tlscps && M[cpu/tlscps/$n]=$(median "${cpu[tlscps/$n]}")
  if ran grpc; then
    M[p50/grpc/$n]=$(median "${p50[grpc/$n]}"); M[p99/grpc/$n]=$(median "${p99[grpc/$n]}"); M[cpu/grpc/$n]=$(median "${cpu[grpc/$n]}")
  fi
done

echo
echo "median of $ROUNDS rounds (cpu: CPU us per request of the proxy, the backend and wrk; busy: the machine's busy share)"
printf "%-7s %-12s %10s %8s %8s %8s %8s %8s %8s %8s %6s\n" cell proxy "req/s" "p50 ms" "p99 ms" "vs nginx" "vs hapr" "cpu" "backend" "wrk" busy
for k in h1 h1pin tls policy gzip; do
  ran "$k" || continue
  for n in "${names[@]}"; do
    printf "%-7s %-12s %10.0f %8s %8s %8s %8s %8s %8s %8s %6s\n" "$k" "$n" "${M[rps/$k/$n]}" "${M[p50/$k/$n]}" "${M[p99/$k/$n]}" \
      "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/nginx]}")" "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/haproxy]}")" "${M[cpu/$k/$n]}" \
      "${M[bcpu/$k/$n]}" "${M[wcpu/$k/$n]}" "${M[busy/$k/$n]}"
  done
done
if ran h2c || ran h2tls; then
  printf "%-7s %-12s %12s %10s %14s %16s\n" cell proxy "req/s" "mean ms" "rps vs nginx" "rps vs haproxy"
fi
for k in h2c h2tls; do
  ran "$k" || continue
  for n in "${names[@]}"; do
    printf "%-7s %-12s %12.0f %10s %14s %16s\n" "$k" "$n" "${M[rps/$k/$n]}" "${M[mean/$k/$n]}" \
      "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/nginx]}")" "$(ratio "${M[rps/$k/$n]}" "${M[rps/$k/haproxy]}")"
  done
done
if ran tlscps; then
  printf "%-7s %-12s %12s %14s %16s %14s\n" cell proxy "handshakes/s" "vs nginx" "vs haproxy" "cpu us/hs"
  for n in "${names[@]}"; do
    printf "%-7s %-12s %12.0f %14s %16s %14s\n" tlscps "$n" "${M[rps/tlscps/$n]}" "$(ratio "${M[rps/tlscps/$n]}" "${M[rps/tlscps/nginx]}")" "$(ratio "${M[rps/tlscps/$n]}" "${M[rps/tlscps/haproxy]}")" "${M[cpu/tlscps/$n]}"
  done
  echo "TLS for every proxy: ${tlsparams[tlscps/switchyard]}${tlsparams[h2tls/switchyard]:+ (h2load: ${tlsparams[h2tls/switchyard]})}"
fi
if ran grpc; then
  printf "%-7s %-12s %12s %8s %8s %14s %16s %14s\n" cell proxy "calls/s" "p50 ms" "p99 ms" "vs nginx" "vs haproxy" "cpu us/call"
  for n in "${names[@]}"; do
    printf "%-7s %-12s %12.0f %8s %8s %14s %16s %14s\n" grpc "$n" "${M[rps/grpc/$n]}" "${M[p50/grpc/$n]}" "${M[p99/grpc/$n]}" \
      "$(ratio "${M[rps/grpc/$n]}" "${M[rps/grpc/nginx]}")" "$(ratio "${M[rps/grpc/$n]}" "${M[rps/grpc/haproxy]}")" "${M[cpu/grpc/$n]}"
  done
  echo "grpc: unary TestService/UnaryCall, ${GRPC_REQ} B request, ${GRPC_RESP} B answer, every call status OK with the whole payload"
fi
ran policy && ran h1 && echo "policy: switchyard's policy route at $(ratio "${M[rps/policy/switchyard]}" "${M[rps/h1/switchyard]}")x its plain route's req/s (target >= 0.97)"
ran gzip && echo "gzip: a 20 KB JSON body at gzip level $GZIP_LEVEL, switchyard $(ratio "${M[rps/gzip/switchyard]}" "${M[rps/gzip/nginx]}")x nginx (target >= 1.0)"
for k in h1 h1pin h2c tls tlscps h2tls grpc policy gzip; do
  ran "$k" || { echo "CELLS=\"$CELLS\" is not every cell: no JSON written"; exit 0; }
done

# The flat JSON: the keys of earlier runs unchanged, the TLS cells added.
json="{"
add() { json="$json\"$1\": $2, "; }
for n in "${names[@]}"; do
  add "${n}_rps" "${M[rps/h1/$n]}"; add "${n}_p50_ms" "${M[p50/h1/$n]}"; add "${n}_p99_ms" "${M[p99/h1/$n]}"
  add "h2_${n}_rps" "${M[rps/h2c/$n]}"; add "h2_${n}_mean_ms" "${M[mean/h2c/$n]}"
  add "${n}_cpu_us_per_req" "${M[cpu/h1/$n]}"; add "${n}_backend_cpu_us_per_req" "${M[bcpu/h1/$n]}"
  add "${n}_wrk_cpu_us_per_req" "${M[wcpu/h1/$n]}"; add "${n}_box_busy" "${M[busy/h1/$n]}"
  add "${n}_tls_rps" "${M[rps/tls/$n]}"; add "${n}_tls_p50_ms" "${M[p50/tls/$n]}"; add "${n}_tls_p99_ms" "${M[p99/tls/$n]}"
  add "${n}_tls_cpu_us_per_req" "${M[cpu/tls/$n]}"; add "${n}_tls_backend_cpu_us_per_req" "${M[bcpu/tls/$n]}"
  add "${n}_tls_wrk_cpu_us_per_req" "${M[wcpu/tls/$n]}"; add "${n}_tls_box_busy" "${M[busy/tls/$n]}"
  add "${n}_tls_cps" "${M[rps/tlscps/$n]}"; add "${n}_tls_cpu_us_per_handshake" "${M[cpu/tlscps/$n]}"
  add "${n}_h2tls_rps" "${M[rps/h2tls/$n]}"; add "${n}_h2tls_mean_ms" "${M[mean/h2tls/$n]}"
  add "grpc_${n}_rps" "${M[rps/grpc/$n]}"; add "grpc_${n}_p50_ms" "${M[p50/grpc/$n]}"; add "grpc_${n}_p99_ms" "${M[p99/grpc/$n]}"
  add "grpc_${n}_cpu_us_per_call" "${M[cpu/grpc/$n]}"
  add "h1pin_${n}_rps" "${M[rps/h1pin/$n]}"; add "h1pin_${n}_p99_ms" "${M[p99/h1pin/$n]}"
  add "h1pin_${n}_cpu_us_per_req" "${M[cpu/h1pin/$n]}"
  add "policy_${n}_rps" "${M[rps/policy/$n]}"; add "policy_${n}_p99_ms" "${M[p99/policy/$n]}"
  add "gzip_${n}_rps" "${M[rps/gzip/$n]}"; add "gzip_${n}_p99_ms" "${M[p99/gzip/$n]}"; add "gzip_${n}_cpu_us_per_req" "${M[cpu/gzip/$n]}"
done
add policy_ratio_vs_plain "$(ratio "${M[rps/policy/switchyard]}" "${M[rps/h1/switchyard]}")"
add gzip_level "$GZIP_LEVEL"
add gzip_ratio_vs_nginx "$(ratio "${M[rps/gzip/switchyard]}" "${M[rps/gzip/nginx]}")"
add gzip_ratio_vs_haproxy "$(ratio "${M[rps/gzip/switchyard]}" "${M[rps/gzip/haproxy]}")"
add h1pin_ratio_vs_nginx "$(ratio "${M[rps/h1pin/switchyard]}" "${M[rps/h1pin/nginx]}")"
add h1pin_ratio_vs_haproxy "$(ratio "${M[rps/h1pin/switchyard]}" "${M[rps/h1pin/haproxy]}")"
add grpc_rps "${M[rps/grpc/switchyard]}"
add grpc_rps_ratio_haproxy "$(ratio "${M[rps/grpc/switchyard]}" "${M[rps/grpc/haproxy]}")"
add grpc_rps_ratio_nginx "$(ratio "${M[rps/grpc/switchyard]}" "${M[rps/grpc/nginx]}")"
add grpc_rps_ratio_best "$(ratio "${M[rps/grpc/switchyard]}" "$(awk -v a="${M[rps/grpc/haproxy]}" -v b="${M[rps/grpc/nginx]}" 'BEGIN { print (a > b ? a : b) }')")"
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
