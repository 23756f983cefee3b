#!/usr/bin/env bash
# bench/edge.sh — cache-hit serving of a small (480 B) and a 100 KB object: switchyard's edge
# against Varnish and nginx proxy_cache, in front of the same origin, on the same machine, in one
# run, alternating rounds. wrk drives each cache; the table shows requests/s and p99, and the
# ratios. A second switchyard with the HTTP/1.1 fast path disabled (disable_fast_path: every hit
# through net/http) is measured in the same rounds as the before/after reference.
# Writes a flat JSON object to bench/out/edge.json, only when every round passed the checks of
# bench/lib.sh (ports free, every cache answering 200 with the right body before the rounds, no
# non-2xx answer, socket error, timeout or wrong body size in any round). BENCH_SMOKE=1: one
# round of 1 s per cell.
# The mixed row: keep-alive clients whose every tenth request is a miss (a new URL each time, from
# an origin that answers after 1 ms) and the rest hits of the small object (bench/edge/mixed.lua).
# The front door rows (docs/edge.md "Benchmark"), in the same rounds, each server's CPU per
# request read from /proc: TLS hits of both objects over keep-alive HTTP/1.1 (wrk over https)
# and over HTTP/2 (h2load, ALPN h2) against nginx (ssl + http2 on the same proxy_cache) and
# Varnish behind hitch (PROXY v2 to a PROXY listener of the same Varnish); full TLS handshakes
# per second (bench/tlsload) against the same three; HTTP/3 hits of both objects (bench/h3load)
# against Caddy's HTTP/3 serving the same bytes from its file_server. One ECDSA P-256
# certificate made with openssl for the run; TLS 1.3 suites in one order, X25519; the run fails
# unless every server negotiated the same version, suite and group.
# The gzip row: hits of a 20 KB JSON object for clients that send Accept-Encoding: gzip, each
# cache storing or making gzip at level 5: switchyard's edge (compress:, the coding made once and
# stored), Varnish (beresp.do_gzip, gzip_level 5: stored gzipped), nginx (gzip on hits, level 5:
# proxy_cache stores identity, so nginx compresses every hit); bodies checked by length and once
# by decompression.
# The range row (bench/edge-range.sh, run at the end with the same ROUNDS): time to the first byte
# of a range at 90% of a sparse 10 GiB object from a cold cache, switchyard with `slice:` against
# nginx's slice module; its keys go into the same JSON.
# The latency row: p50 and p99 of small hits offered at a fixed LAT_RATE a second to each of the
# four over keep-alive HTTP/1.1 (bench/h1rate, open loop: a request's latency counts from its
# release). wrk's p99 above is each server's at its own saturation, and with wrk on the same cores
# the faster server's tail is mostly threads waiting for a core (docs/measurements/edge.md, "Plain
# 480 B hits' p99"); this row compares the servers at one load.
# Bounded: ROUNDS x (4 servers x 5 rows + 3 x 5 TLS cells + 2 x 2 HTTP/3 cells) x SECONDS_PER_RUN
# of load (defaults 3 x 39 x 4 s).
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
# The front door: switchyard's TLS listener (TCP, and UDP for HTTP/3), nginx's TLS server, hitch,
# Varnish's PROXY listener behind it, Caddy (TCP and UDP) and Caddy's unused HTTP port.
PORT_SY_TLS=18200 PORT_NGINX_TLS=18201 PORT_HITCH=18202 PORT_VARNISH_PROXY=18203 PORT_CADDY=18204 PORT_CADDY_HTTP=18205
# h2load's clients x streams (as bench/l7.sh), tlsload's workers, h3load's connections x streams.
H2_CLIENTS=16 H2_STREAMS=10 HS_WORKERS=16 H3_CONNS=16 H3_STREAMS=10
# The latency row: small hits offered at this fixed rate (bench/h1rate) over CONNECTIONS
# connections, below every server's closed-loop rate on this machine, so every server is measured
# at the same load.
LAT_RATE=${LAT_RATE:-40000}

BENCH=edge
. "$(dirname "$0")/lib.sh"
if is_smoke; then ROUNDS=1 SECONDS_PER_RUN=1; fi
require_binary "$BIN" edge

ensure_packages varnish nginx wrk curl hitch caddy nghttp2-client openssl procps
# Only the HTTP ports are fixed (Varnish picks its management port itself; Caddy's admin API is off).
ports_free $PORT_ORIGIN $PORT_SY $PORT_VARNISH $PORT_NGINX $PORT_SYNET \
  $PORT_SY_TLS $PORT_NGINX_TLS $PORT_HITCH $PORT_VARNISH_PROXY $PORT_CADDY $PORT_CADDY_HTTP

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
go build -o "$WORK/tlsload" ./bench/tlsload
go build -o "$WORK/h3load" ./bench/h3load
go build -o "$WORK/h1rate" ./bench/h1rate
"$WORK/origin" -listen 127.0.0.1:$PORT_ORIGIN &
PIDS+=($!)

# One ECDSA P-256 certificate for every TLS server, made for this run (as bench/l7.sh does).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=bench.test \
  -addext "subjectAltName=DNS:bench.test,IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
cat "$WORK/cert.pem" "$WORK/key.pem" >"$WORK/hitch.pem"
# The TLS 1.3 suites in one order for the OpenSSL servers, the order Go's servers (switchyard,
# Caddy) use on AES hardware; each server picks by its own order.
SUITES=TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256

# switchyard: memory tier only, like the two peers' memory storage; the TLS listener (HTTP/1.1
# and HTTP/2 by ALPN) and HTTP/3 on the same port over UDP.
cat > "$WORK/switchyard.yaml" <<YAML
listen: 127.0.0.1:$PORT_SY
origin: http://127.0.0.1:$PORT_ORIGIN
memory: {max_bytes: 256MiB}
compress: {encodings: [gzip], types: [application/json], levels: {gzip: 5}}
tls:
  listen: 127.0.0.1:$PORT_SY_TLS
  certificates: [{cert: "$WORK/cert.pem", key: "$WORK/key.pem"}]
  http3: true
YAML
"$BIN" edge run --config "$WORK/switchyard.yaml" >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)
SY_PID=$!
# The same edge with every hit through net/http: the reference the fast path is measured against.
cat > "$WORK/synet.yaml" <<YAML
listen: 127.0.0.1:$PORT_SYNET
origin: http://127.0.0.1:$PORT_ORIGIN
memory: {max_bytes: 256MiB}
compress: {encodings: [gzip], types: [application/json], levels: {gzip: 5}}
disable_fast_path: true
YAML
"$BIN" edge run --config "$WORK/synet.yaml" >"$WORK/synet.log" 2>&1 &
PIDS+=($!)

# Varnish: default VCL with the origin as backend, 256 MB malloc storage, in the foreground; a
# second listener speaking the PROXY protocol for hitch, and HTTP/2 on (hitch passes ALPN h2 on in
# the PROXY v2 header; Varnish serves h2 only when it is on).
# Its VCL is the built-in one plus gzip for JSON (stored gzipped; gunzipped for clients that do
# not take gzip).
cat > "$WORK/edge.vcl" <<VCL
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "$PORT_ORIGIN"; }
sub vcl_backend_response { if (beresp.http.Content-Type ~ "json") { set beresp.do_gzip = true; } }
VCL
varnishd -F -a 127.0.0.1:$PORT_VARNISH -a 127.0.0.1:$PORT_VARNISH_PROXY,PROXY -p feature=+http2 -p gzip_level=5 \
  -f "$WORK/edge.vcl" -s malloc,256m -n "$WORK/varnish" >"$WORK/varnish.log" 2>&1 &
PIDS+=($!)
VARNISH_PID=$!

# hitch: Varnish's TLS terminator, two workers (nginx has one per core), PROXY v2 to Varnish;
# its workers run as the package's _hitch user (hitch refuses root).
mkdir -p "$WORK/hitch-ocsp"
cat > "$WORK/hitch.conf" <<CONF
frontend = "[127.0.0.1]:$PORT_HITCH"
backend = "[127.0.0.1]:$PORT_VARNISH_PROXY"
pem-file = "$WORK/hitch.pem"
workers = 2
daemon = off
write-proxy-v2 = on
alpn-protos = "h2, http/1.1"
tls-protos = TLSv1.2 TLSv1.3
ciphersuites = "$SUITES"
prefer-server-ciphers = on
ecdh-curve = "X25519:prime256v1"
ocsp-dir = "$WORK/hitch-ocsp"
user = "_hitch"
group = "_hitch"
CONF
hitch --config="$WORK/hitch.conf" >"$WORK/hitch.log" 2>&1 &
PIDS+=($!)
HITCH_PID=$!

# Caddy: HTTP/3 (and HTTP/1.1, HTTP/2) from its file_server, the two objects' bytes as files;
# admin API off, no redirect listener, its state in the run's directory.
mkdir -p "$WORK/www" "$WORK/caddy"
head -c 480 /dev/zero | tr '\0' s >"$WORK/www/small"
head -c 102400 /dev/zero | tr '\0' k >"$WORK/www/100k"
cat > "$WORK/Caddyfile" <<CONF
{
  admin off
  auto_https disable_redirects
  http_port $PORT_CADDY_HTTP
  https_port $PORT_CADDY
  servers {
    protocols h1 h2 h3
  }
}
https://127.0.0.1:$PORT_CADDY {
  bind 127.0.0.1
  tls $WORK/cert.pem $WORK/key.pem
  root * $WORK/www
  file_server
}
CONF
HOME="$WORK/caddy" XDG_DATA_HOME="$WORK/caddy" XDG_CONFIG_HOME="$WORK/caddy" \
  caddy run --config "$WORK/Caddyfile" --adapter caddyfile >"$WORK/caddy.log" 2>&1 &
PIDS+=($!)
CADDY_PID=$!

# nginx: proxy_cache in front of the origin, one worker per core, no access log (neither of the
# others logs requests either). The TLS server (HTTP/1.1 and HTTP/2 by ALPN) uses the same cache;
# it keeps its connections for as many requests as the clients send (nginx closes after 1,000 by
# default: a new handshake, or h2load's streams failing on GOAWAY).
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
    gzip on; gzip_comp_level 5; gzip_types application/json; gzip_min_length 256; gzip_proxied any;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache edge;
      proxy_cache_lock on;
      add_header X-Cache \$upstream_cache_status;
    }
  }
  server {
    listen 127.0.0.1:$PORT_NGINX_TLS ssl http2;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites $SUITES;
    keepalive_requests 1000000;
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
NGINX_PID=$!

declare -A PORT=([switchyard]=$PORT_SY [varnish]=$PORT_VARNISH [nginx]=$PORT_NGINX [sy-nethttp]=$PORT_SYNET)
NAMES=(switchyard sy-nethttp varnish nginx)
# The front door's servers: "varnish" is Varnish behind hitch there; HTTP/3 against Caddy.
declare -A TLSPORT=([switchyard]=$PORT_SY_TLS [nginx]=$PORT_NGINX_TLS [varnish]=$PORT_HITCH [caddy]=$PORT_CADDY)
TLS_NAMES=(switchyard nginx varnish)
H3_NAMES=(switchyard caddy)
declare -A SIZE=([small]=480 [100k]=102400)
# gzip_len URL: the length of URL's gzip body, which must decode to the origin's /json.
gzip_len() {
  local said
  said=$(curl -s -H 'Accept-Encoding: gzip' -D "$WORK/gz.head" -o "$WORK/gz.body" -w '%{http_code} %{size_download}' --max-time 2 "$1") || true
  [ "${said%% *}" = 200 ] && grep -qi '^Content-Encoding: gzip' "$WORK/gz.head" &&
    gunzip -c "$WORK/gz.body" | cmp -s - <(curl -s "http://127.0.0.1:$PORT_ORIGIN/json") || { echo "answered '$said' without a gzip body of /json"; return 1; }
  echo "${said#* }"
}
declare -A GZLEN

# http_len URL LEN [CURL OPTION...] succeeds when URL answers 200 with a LEN-byte body (and, with
# --http2, over HTTP/2).
http_len() {
  local url=$1 len=$2 said want=1.1
  shift 2
  [[ " $* " == *" --http2 "* ]] && want=2
  said=$(curl -sk "$@" -o /dev/null -w '%{http_code} %{size_download} %{http_version}' --max-time 2 "$url") || true
  [ "$said" = "200 $len $want" ] || { echo "answered '${said:-nothing}' (status, body bytes, HTTP version), want '200 $len $want'"; return 1; }
}
# h3_len URL LEN succeeds when URL answers 200 over HTTP/3 with a LEN-byte body (one h3load request).
h3_len() { "$WORK/h3load" -url "$1" -size "$2" -c 1 -m 1 -n 1 -d 2s -timeout 2s 2>&1; }

http_ready "the origin" "http://127.0.0.1:$PORT_ORIGIN/small"
for name in "${NAMES[@]}"; do
  http_ready "$name" "http://127.0.0.1:${PORT[$name]}/small"
  # Warm: each cache fetches both objects once; the measured phase is hits only.
  for obj in small 100k; do
    for _ in 1 2; do http_len "http://127.0.0.1:${PORT[$name]}/$obj" "${SIZE[$obj]}" >/dev/null || bench_fail "warm-up $name /$obj: $(http_len "http://127.0.0.1:${PORT[$name]}/$obj" "${SIZE[$obj]}")"; done
  done
  # The gzip row's object: fetched, then its gzip coding made or stored, then its length.
  for _ in 1 2 3; do gzip_len "http://127.0.0.1:${PORT[$name]}/json" >/dev/null || true; done
  GZLEN[$name]=$(gzip_len "http://127.0.0.1:${PORT[$name]}/json") || bench_fail "warm-up $name /json (gzip): ${GZLEN[$name]}"
done
# The front door: every server answers each object over TLS with HTTP/1.1 and HTTP/2 (and HTTP/3
# where measured) before the rounds; that also warms the caches under these requests' keys.
for name in "${TLS_NAMES[@]}" caddy; do
  base="https://127.0.0.1:${TLSPORT[$name]}"
  for obj in small 100k; do
    ready "$name (TLS, HTTP/1.1) /$obj" 10 http_len "$base/$obj" "${SIZE[$obj]}" --http1.1
    ready "$name (TLS, HTTP/2) /$obj" 10 http_len "$base/$obj" "${SIZE[$obj]}" --http2
    if [[ " ${H3_NAMES[*]} " == *" $name "* ]]; then ready "$name (HTTP/3) /$obj" 10 h3_len "$base/$obj" "${SIZE[$obj]}"; fi
  done
done
# tlsload asks with Host bench.test (the certificate's name): warm that key too.
for name in "${TLS_NAMES[@]}"; do
  out=$("$WORK/tlsload" -addr "127.0.0.1:${TLSPORT[$name]}" -path /small -c 1 -d 200ms -close-notify 2>&1) || bench_fail "warm-up $name (tlsload): $out"
done
before=$(curl -s http://127.0.0.1:$PORT_ORIGIN/count)
misses_before=$(curl -s http://127.0.0.1:$PORT_ORIGIN/misscount)
OBJS=(small 100k mixed gzip)

# run_wrk ROUND NAME OBJ -> checks the run and appends "rps p99_ms" to $WORK/NAME-OBJ. OBJ mixed
# runs bench/edge/mixed.lua, its miss URLs unique to the round and the cache; the others
# bench/wrk-bytes.lua (the bytes read, for the body-size check).
run_wrk() {
  local out script=(-s bench/wrk-bytes.lua) len=${SIZE[$3]:-480} hdr=()
  local url="http://127.0.0.1:${PORT[$2]}/$3"
  if [ "$3" = mixed ]; then
    script=(-s bench/edge/mixed.lua)
    url="http://127.0.0.1:${PORT[$2]}/"
  fi
  if [ "$3" = gzip ]; then
    url="http://127.0.0.1:${PORT[$2]}/json" hdr=(-H "Accept-Encoding: gzip") len=${GZLEN[$2]}
  fi
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency "${hdr[@]}" "${script[@]}" "$url" -- "$2-r$1" 2>&1) || bench_fail "round $1 $2 /$3: wrk failed: $out"
  check_wrk "round $1 $2 /$3" "$out"
  check_wrk_body "round $1 $2 /$3" "$out" "$len" "$CONNECTIONS"
  awk '
    /Requests\/sec:/ { rps = $2 }
    /^ *99%/ { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
               ms = (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }
    END { printf "%s %s\n", rps, ms }' <<<"$out" >> "$WORK/$2-$3"
}

# procs NAME prints the processes whose CPU a front-door round charges to NAME: nginx's master
# and workers, Varnish's manager and cache process and hitch's workers together.
procs() {
  case $1 in
  switchyard) echo "$SY_PID" ;;
  nginx) proc_tree "$NGINX_PID" ;;
  varnish) proc_tree "$VARNISH_PID" "$HITCH_PID" ;;
  caddy) echo "$CADDY_PID" ;;
  esac
}

# The front door's cells: tls-OBJ (wrk over https, keep-alive HTTP/1.1), h2-OBJ (h2load, ALPN
# h2), hs (tlsload: full handshakes), h3-OBJ (h3load).
FD_CELLS=(tls-small tls-100k h2-small h2-100k hs h3-small h3-100k)
# cell_names CELL prints the servers a cell compares.
cell_names() { case $1 in h3-*) echo "${H3_NAMES[@]}" ;; *) echo "${TLS_NAMES[@]}" ;; esac; }
declare -A TLSPARAMS
# run_fd ROUND CELL NAME -> checks the run and appends "rate latency_ms cpu_us" to
# $WORK/fd-CELL-NAME: requests/s (handshakes/s for hs), p99 (wrk, h3load) or mean (h2load) in
# ms (0 for hs), and the server's CPU per request (per handshake) over the round.
run_fd() {
  local r=$1 cell=$2 name=$3 what="round $1 $2 $3" out t0 t1 n v lat ps
  local obj=${cell#*-} url="https://127.0.0.1:${TLSPORT[$name]}/${cell#*-}"
  ps=$(procs "$name")
  # shellcheck disable=SC2086
  t0=$(cpu_ticks $ps)
  case $cell in
  tls-*)
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency -s bench/wrk-bytes.lua "$url" 2>&1) || bench_fail "$what: wrk failed: $out"
    # shellcheck disable=SC2086
    t1=$(cpu_ticks $ps)
    check_wrk "$what" "$out"
    check_wrk_body "$what" "$out" "${SIZE[$obj]}" "$CONNECTIONS"
    v=$(awk '/Requests\/sec:/ { print $2 }' <<<"$out")
    n=$(awk '/ requests in / { print $1 }' <<<"$out")
    lat=$(awk '/^ *99%/ { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
                          printf "%.3f", (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }' <<<"$out") ;;
  h2-*)
    out=$(h2load -c"$H2_CLIENTS" -m"$H2_STREAMS" -t"$THREADS" -D"$SECONDS_PER_RUN" "$url" 2>&1) || bench_fail "$what: h2load exited non-zero: $out"
    # shellcheck disable=SC2086
    t1=$(cpu_ticks $ps)
    check_h2load "$what" "$out" h2
    check_h2load_body "$what" "$out" "${SIZE[$obj]}" $((H2_CLIENTS * H2_STREAMS))
    v=$(awk '/^finished in/ { print $4 }' <<<"$out")
    n=$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^succeeded/) print $i }' <<<"$out")
    lat=$(awk '/^time for request:/ { v = $6; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
                                      printf "%.3f", (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }' <<<"$out")
    TLSPARAMS[$cell/$name]=$(grep -E '^(TLS Protocol|Cipher|Server Temp Key):' <<<"$out" | awk '{print $NF == "bits" ? $(NF-2) : $NF}' | tr '\n' ' ') ;;
  hs)
    out=$("$WORK/tlsload" -addr "127.0.0.1:${TLSPORT[$name]}" -path /small -c "$HS_WORKERS" -d "${SECONDS_PER_RUN}s" -close-notify 2>&1) || bench_fail "$what: $out"
    # shellcheck disable=SC2086
    t1=$(cpu_ticks $ps)
    v=$(kv cps "$out") n=$(kv handshakes "$out") lat=0
    TLSPARAMS[$cell/$name]=$(grep -o 'version=[^ ]* cipher=[^ ]* group=[^ ]* cert=[^ ]*' <<<"$out") ;;
  h3-*)
    out=$("$WORK/h3load" -url "$url" -size "${SIZE[$obj]}" -c "$H3_CONNS" -m "$H3_STREAMS" -d "${SECONDS_PER_RUN}s" 2>&1) || bench_fail "$what: $out"
    # shellcheck disable=SC2086
    t1=$(cpu_ticks $ps)
    check_loadgen "$what" "$out"
    v=$(kv rps "$out") n=$(kv ok "$out") lat=$(kv p99_ms "$out")
    TLSPARAMS[$cell/$name]="$(kv version "$out") $(kv cipher "$out") $(kv group "$out")" ;;
  esac
  echo "$v $lat $(us_per $((t1 - t0)) "$n")" >> "$WORK/fd-$cell-$name"
}

# run_rate ROUND NAME -> checks the run and appends "rps p50_ms p99_ms" to $WORK/rate-NAME: small
# hits offered at LAT_RATE a second.
run_rate() {
  local out what="round $1 $2 latency at $LAT_RATE/s"
  out=$("$WORK/h1rate" -url "http://127.0.0.1:${PORT[$2]}/small" -size 480 -rate "$LAT_RATE" \
    -c "$CONNECTIONS" -m 1 -d "${SECONDS_PER_RUN}s" -timeout 5s 2>&1) || bench_fail "$what: $out"
  check_loadgen "$what" "$out"
  echo "$(kv rps "$out") $(kv p50_ms "$out") $(kv p99_ms "$out")" >> "$WORK/rate-$2"
}

ORDER=("${NAMES[@]}")
for r in $(seq 1 "$ROUNDS"); do
  for obj in "${OBJS[@]}"; do
    for name in "${ORDER[@]}"; do run_wrk "$r" "$name" "$obj"; done
  done
  for name in "${ORDER[@]}"; do run_rate "$r" "$name"; done
  for cell in "${FD_CELLS[@]}"; do
    read -r -a fd_order <<<"$(cell_names "$cell")"
    k=$(( (r - 1) % ${#fd_order[@]} ))
    for name in "${fd_order[@]:$k}" "${fd_order[@]:0:$k}"; do run_fd "$r" "$cell" "$name"; done
  done
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")  # rotate who goes first each round
done
after=$(curl -s http://127.0.0.1:$PORT_ORIGIN/count)
misses_after=$(curl -s http://127.0.0.1:$PORT_ORIGIN/misscount)

# median of column $2 in file $1
median() { sort -g -k"$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'; }

declare -A RPS P99 LAT
for name in "${NAMES[@]}"; do
  for obj in "${OBJS[@]}"; do
    RPS[$name-$obj]=$(median "$WORK/$name-$obj" 1)
    P99[$name-$obj]=$(median "$WORK/$name-$obj" 2)
  done
  LAT[rps/$name]=$(median "$WORK/rate-$name" 1)
  LAT[p50/$name]=$(median "$WORK/rate-$name" 2)
  LAT[p99/$name]=$(median "$WORK/rate-$name" 3)
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
gzlens=""
for n in "${NAMES[@]}"; do gzlens="$gzlens $n ${GZLEN[$n]} B;"; done
echo "gzip = hits of a 20 KB JSON object for Accept-Encoding: gzip, level 5 (gzip bodies:$gzlens); switchyard $(ratio "${RPS[switchyard-gzip]}" "${RPS[varnish-gzip]}")x Varnish (target >= 1.3)"
echo
echo "latency at one load: small hits offered at $LAT_RATE/s over $CONNECTIONS keep-alive connections (bench/h1rate, open loop), medians"
printf '%-11s | %12s | %8s | %8s | %14s\n' cache "requests/s" "p50 ms" "p99 ms" "p99 vs varnish"
printf -- '------------|--------------|----------|----------|---------------\n'
for name in "${NAMES[@]}"; do
  printf '%-11s | %12.0f | %8s | %8s | %14s\n' "$name" "${LAT[rps/$name]}" "${LAT[p50/$name]}" "${LAT[p99/$name]}" \
    "$(ratio "${LAT[p99/$name]}" "${LAT[p99/varnish]}")"
done
echo "origin requests during the measured phase: $((after - before)) (0 means every measured hit row was all hits); mixed-row misses fetched: $((misses_after - misses_before))"

# The TLS parameters must be the same for every server, or the TLS cells compare different work.
for cell in h2-small h2-100k hs h3-small h3-100k; do
  read -r -a fd_names <<<"$(cell_names "$cell")"
  for name in "${fd_names[@]:1}"; do
    [ "${TLSPARAMS[$cell/$name]}" = "${TLSPARAMS[$cell/${fd_names[0]}]}" ] ||
      bench_fail "$cell: $name negotiated '${TLSPARAMS[$cell/$name]}', ${fd_names[0]} '${TLSPARAMS[$cell/${fd_names[0]}]}': the servers' TLS settings differ"
  done
done

declare -A FD
for cell in "${FD_CELLS[@]}"; do
  for name in $(cell_names "$cell"); do
    FD[rate/$cell/$name]=$(median "$WORK/fd-$cell-$name" 1)
    FD[lat/$cell/$name]=$(median "$WORK/fd-$cell-$name" 2)
    FD[cpu/$cell/$name]=$(median "$WORK/fd-$cell-$name" 3)
  done
done
# vs CELL NAME PEER prints NAME's rate over PEER's in CELL, or "-" when PEER is not in the cell.
vs() { [ -n "${FD[rate/$1/$3]:-}" ] && ratio "${FD[rate/$1/$2]}" "${FD[rate/$1/$3]}" || echo -; }

echo
echo "front door: TLS 1.3 hits (wrk -t$THREADS -c$CONNECTIONS, keep-alive HTTP/1.1; h2load -c$H2_CLIENTS -m$H2_STREAMS, ALPN h2), full handshakes (tlsload -c$HS_WORKERS), HTTP/3 hits (h3load -c$H3_CONNS -m$H3_STREAMS); medians"
echo "varnish = Varnish behind hitch (PROXY v2); caddy = Caddy's file_server; latency: p99 (tls, h3) or mean (h2) in ms; hs: handshakes/s; cpu: the server's CPU us per request (per handshake)"
printf '%-9s | %-10s | %12s | %8s | %8s | %10s | %9s | %8s\n' cell server "req/s" "ms" "cpu us" "vs varnish" "vs nginx" "vs caddy"
printf -- '----------|------------|--------------|----------|----------|------------|-----------|---------\n'
for cell in "${FD_CELLS[@]}"; do
  for name in $(cell_names "$cell"); do
    lat=${FD[lat/$cell/$name]}; [ "$cell" = hs ] && lat=-
    printf '%-9s | %-10s | %12.0f | %8s | %8s | %10s | %9s | %8s\n' "$cell" "$name" "${FD[rate/$cell/$name]}" "$lat" \
      "${FD[cpu/$cell/$name]}" "$(vs "$cell" "$name" varnish)" "$(vs "$cell" "$name" nginx)" "$(vs "$cell" "$name" caddy)"
  done
done
read -r TV TC TG TCERT <<<"$(sed 's/[a-z]*=//g' <<<"${TLSPARAMS[hs/switchyard]}")"
echo "TLS for every server: $TV $TC $TG, certificate ${TCERT//_/ }"

# fd_json prints the front door's keys (each line ending in a comma): per cell and server the rate,
# latency and CPU, and the ratios of switchyard's rate (and latency for the TLS HTTP/1.1 rows) to
# each peer's.
fd_json() {
  local obj name peer p
  for obj in small 100k; do
    for name in "${TLS_NAMES[@]}"; do
      echo "  \"tls_${obj}_${name}_rps\": ${FD[rate/tls-$obj/$name]},"
      echo "  \"tls_${obj}_${name}_p99_ms\": ${FD[lat/tls-$obj/$name]},"
      echo "  \"tls_${obj}_${name}_cpu_us_per_req\": ${FD[cpu/tls-$obj/$name]},"
      echo "  \"h2_${obj}_${name}_rps\": ${FD[rate/h2-$obj/$name]},"
      echo "  \"h2_${obj}_${name}_mean_ms\": ${FD[lat/h2-$obj/$name]},"
      echo "  \"h2_${obj}_${name}_cpu_us_per_req\": ${FD[cpu/h2-$obj/$name]},"
    done
    for peer in nginx varnish; do
      echo "  \"tls_${obj}_rps_ratio_${peer}\": $(ratio "${FD[rate/tls-$obj/switchyard]}" "${FD[rate/tls-$obj/$peer]}"),"
      echo "  \"tls_${obj}_p99_ratio_${peer}\": $(ratio "${FD[lat/tls-$obj/switchyard]}" "${FD[lat/tls-$obj/$peer]}"),"
      echo "  \"h2_${obj}_rps_ratio_${peer}\": $(ratio "${FD[rate/h2-$obj/switchyard]}" "${FD[rate/h2-$obj/$peer]}"),"
    done
    p=h3_; [ "$obj" = small ] || p=h3_${obj}_
    for name in "${H3_NAMES[@]}"; do
      echo "  \"${p}${name}_rps\": ${FD[rate/h3-$obj/$name]},"
      echo "  \"${p}${name}_p99_ms\": ${FD[lat/h3-$obj/$name]},"
      echo "  \"${p}${name}_cpu_us_per_req\": ${FD[cpu/h3-$obj/$name]},"
    done
    echo "  \"${p}rps_ratio_caddy\": $(ratio "${FD[rate/h3-$obj/switchyard]}" "${FD[rate/h3-$obj/caddy]}"),"
    echo "  \"${p}cpu_ratio_caddy\": $(ratio "${FD[cpu/h3-$obj/switchyard]}" "${FD[cpu/h3-$obj/caddy]}"),"
  done
  for name in "${TLS_NAMES[@]}"; do
    echo "  \"handshakes_${name}_per_s\": ${FD[rate/hs/$name]},"
    echo "  \"handshakes_${name}_cpu_us\": ${FD[cpu/hs/$name]},"
  done
  for peer in nginx varnish; do
    echo "  \"handshakes_ratio_${peer}\": $(ratio "${FD[rate/hs/switchyard]}" "${FD[rate/hs/$peer]}"),"
  done
  echo "  \"tls_version\": \"$TV\", \"tls_cipher\": \"$TC\", \"tls_group\": \"$TG\", \"tls_cert\": \"${TCERT//_/ }\","
}

# The range row: its own origin, edge and nginx on ports 18206-18208, the same rounds.
ROUNDS=$ROUNDS BIN=$BIN BENCH_SMOKE=$BENCH_SMOKE RANGE_KEYS="$WORK/range.keys" bash "$(dirname "$0")/edge-range.sh" ||
  bench_fail "the range row failed"

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
  "gzip_switchyard_rps": ${RPS[switchyard-gzip]},
  "gzip_varnish_rps": ${RPS[varnish-gzip]},
  "gzip_nginx_rps": ${RPS[nginx-gzip]},
  "gzip_nethttp_rps": ${RPS[sy-nethttp-gzip]},
  "gzip_switchyard_p99_ms": ${P99[switchyard-gzip]},
  "gzip_varnish_p99_ms": ${P99[varnish-gzip]},
  "gzip_ratio_vs_varnish": $(ratio "${RPS[switchyard-gzip]}" "${RPS[varnish-gzip]}"),
  "gzip_ratio_vs_nginx": $(ratio "${RPS[switchyard-gzip]}" "${RPS[nginx-gzip]}"),
  "origin_requests_measured": $((after - before)),
  "latency_rate": $LAT_RATE,
$(for name in "${NAMES[@]}"; do k=${name//-/_}; echo "  \"latency_${k}_rps\": ${LAT[rps/$name]}, \"latency_${k}_p50_ms\": ${LAT[p50/$name]}, \"latency_${k}_p99_ms\": ${LAT[p99/$name]},"; done)
  "latency_p99_ratio_varnish": $(ratio "${LAT[p99/switchyard]}" "${LAT[p99/varnish]}"),
  "latency_p99_ratio_nginx": $(ratio "${LAT[p99/switchyard]}" "${LAT[p99/nginx]}"),
$(fd_json)
$(cat "$WORK/range.keys")
  "rounds": $ROUNDS,
  "seconds_per_run": $SECONDS_PER_RUN,
  "connections": $CONNECTIONS,
  "smoke": $(smoke_json)
}
JSON
