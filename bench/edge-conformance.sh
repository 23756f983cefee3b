#!/usr/bin/env bash
# bench/edge-conformance.sh — runs the public HTTP caching conformance suite
# (https://github.com/http-tests/cache-tests) against switchyard's edge: the suite's origin server
# on loopback, the edge in front of it, the suite's client through the edge. Prints the required
# and optional pass counts (and, with VERBOSE=1, every test that did not pass).
# TLS=1 runs the suite's client over HTTPS (HTTP/1.1 over TLS, the only protocol its Node client
# speaks) against the edge's TLS listener (PORT_EDGE_TLS) instead, with a certificate for
# 127.0.0.1 made here by openssl and trusted through NODE_EXTRA_CA_CERTS; the edge then runs from
# a --config written here (the edge flags given still apply on top of it).
# The suite is not vendored: set CACHE_TESTS_DIR to a checkout with its npm dependencies
# installed (`npm install` there; the interim-response tests need undici).
# Usage: CACHE_TESTS_DIR=/path/to/cache-tests [TLS=1] bash bench/edge-conformance.sh [BIN] [edge flags...]
set -euo pipefail

BIN=${1:-bin/switchyard}
shift || true
DIR=${CACHE_TESTS_DIR:?set CACHE_TESTS_DIR to a checkout of http-tests/cache-tests}
PORT_ORIGIN=${PORT_ORIGIN:-18190}
PORT_EDGE=${PORT_EDGE:-18191}
PORT_EDGE_TLS=${PORT_EDGE_TLS:-18192}
TLS=${TLS:-}
if [ -n "$TLS" ]; then OUT=${OUT:-bench/out/edge-conformance-tls.json}; else OUT=${OUT:-bench/out/edge-conformance.json}; fi
HERE=$(cd "$(dirname "$0")" && pwd)

for p in "$PORT_ORIGIN" "$PORT_EDGE" ${TLS:+"$PORT_EDGE_TLS"}; do
  if ss -ltnH "sport = :$p" | grep -q .; then echo "port $p is in use; set PORT_ORIGIN/PORT_EDGE" >&2; exit 1; fi
done
mkdir -p "$(dirname "$OUT")"
LOGS=$(mktemp -d)
(cd "$DIR" && npm_config_protocol=http npm_config_port=$PORT_ORIGIN npm_config_pidfile=$LOGS/server.pid \
  exec node test-engine/server/server.mjs) >"$LOGS/server.log" 2>&1 &
SERVER=$!
BASE="http://127.0.0.1:$PORT_EDGE"
CONFIG=()
if [ -n "$TLS" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout "$LOGS/edge.key" -out "$LOGS/edge.pem" 2>/dev/null
  printf 'listen: 127.0.0.1:%s\norigin: http://127.0.0.1:%s\ntls:\n  listen: 127.0.0.1:%s\n  certificates: [{cert: %s, key: %s}]\n' \
    "$PORT_EDGE" "$PORT_ORIGIN" "$PORT_EDGE_TLS" "$LOGS/edge.pem" "$LOGS/edge.key" >"$LOGS/edge.yaml"
  CONFIG=(--config "$LOGS/edge.yaml")
  BASE="https://127.0.0.1:$PORT_EDGE_TLS"
  export NODE_EXTRA_CA_CERTS=$LOGS/edge.pem
fi
"$BIN" edge run "${CONFIG[@]}" --origin "http://127.0.0.1:$PORT_ORIGIN" --listen "127.0.0.1:$PORT_EDGE" "$@" >"$LOGS/edge.log" 2>&1 &
EDGE=$!
trap 'kill $EDGE $SERVER 2>/dev/null; wait $EDGE $SERVER 2>/dev/null; rm -rf "$LOGS"' EXIT
for _ in $(seq 50); do
  curl -s -o /dev/null ${TLS:+--cacert "$LOGS/edge.pem"} "$BASE/" && break
  sleep 0.2
done
(cd "$DIR" && npm_config_base="$BASE" npm_config_id= npm_package_config_id= \
  timeout 900 node --no-warnings test-engine/cli.mjs) >"$OUT"
node "$HERE/edge/conformance-count.mjs" "$DIR" "$OUT" ${VERBOSE:+verbose}
