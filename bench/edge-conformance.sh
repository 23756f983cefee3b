#!/usr/bin/env bash
# bench/edge-conformance.sh — runs the public HTTP caching conformance suite
# (https://github.com/http-tests/cache-tests) against switchyard's edge: the suite's origin server
# on loopback, the edge in front of it, the suite's client through the edge. Prints the required
# and optional pass counts (and, with VERBOSE=1, every test that did not pass).
# The suite is not vendored: set CACHE_TESTS_DIR to a checkout with its npm dependencies
# installed (`npm install` there; the interim-response tests need undici).
# Usage: CACHE_TESTS_DIR=/path/to/cache-tests bash bench/edge-conformance.sh [BIN] [edge flags...]
set -euo pipefail

BIN=${1:-bin/switchyard}
shift || true
DIR=${CACHE_TESTS_DIR:?set CACHE_TESTS_DIR to a checkout of http-tests/cache-tests}
PORT_ORIGIN=${PORT_ORIGIN:-18190}
PORT_EDGE=${PORT_EDGE:-18191}
OUT=${OUT:-bench/out/edge-conformance.json}
HERE=$(cd "$(dirname "$0")" && pwd)

for p in "$PORT_ORIGIN" "$PORT_EDGE"; do
  if ss -ltnH "sport = :$p" | grep -q .; then echo "port $p is in use; set PORT_ORIGIN/PORT_EDGE" >&2; exit 1; fi
done
mkdir -p "$(dirname "$OUT")"
LOGS=$(mktemp -d)
(cd "$DIR" && npm_config_protocol=http npm_config_port=$PORT_ORIGIN npm_config_pidfile=$LOGS/server.pid \
  exec node test-engine/server/server.mjs) >"$LOGS/server.log" 2>&1 &
SERVER=$!
"$BIN" edge run --origin "http://127.0.0.1:$PORT_ORIGIN" --listen "127.0.0.1:$PORT_EDGE" "$@" >"$LOGS/edge.log" 2>&1 &
EDGE=$!
trap 'kill $EDGE $SERVER 2>/dev/null; wait $EDGE $SERVER 2>/dev/null; rm -rf "$LOGS"' EXIT
for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT_EDGE/" && break
  sleep 0.2
done
(cd "$DIR" && npm_config_base="http://127.0.0.1:$PORT_EDGE" npm_config_id= npm_package_config_id= \
  timeout 900 node --no-warnings test-engine/cli.mjs) >"$OUT"
node "$HERE/edge/conformance-count.mjs" "$DIR" "$OUT" ${VERBOSE:+verbose}
