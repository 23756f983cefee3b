#!/usr/bin/env bash
# bench/lib_test.sh — tests of bench/lib.sh's checks: each must refuse what it exists to refuse
# and pass a clean run. The tool outputs below are in the tools' own formats (wrk 4.1, h2load 1.52,
# dnsperf 2.10 on Debian 12; most copied from real runs), cut to the lines the checks read.
# ports_free is tried against a real listener (bench/edge's origin on a free port of the bench
# range). Run: bash bench/lib_test.sh (make bench-smoke runs it first).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=libtest
. bench/lib.sh

failures=0
# refuses NAME FUNC ARGS...: the check must exit non-zero (it runs in a subshell: bench_fail exits).
refuses() {
	local name=$1 msg
	shift
	if msg=$( ("$@") 2>&1); then
		echo "FAIL $name: accepted" >&2
		failures=$((failures + 1))
	else
		echo "ok   $name: refused: $(grep FAILED <<<"$msg" | head -1)"
	fi
}
# accepts NAME FUNC ARGS...: the check must pass.
accepts() {
	local name=$1 msg
	shift
	if msg=$( ("$@") 2>&1); then
		echo "ok   $name: accepted"
	else
		echo "FAIL $name: refused: $msg" >&2
		failures=$((failures + 1))
	fi
}

wrk_clean='Running 1s test @ http://127.0.0.1:18181/tracking?no=1
  2 threads and 64 connections
  36214 requests in 1.10s, 7.19MB read
Requests/sec:  32921.77'
wrk_non2xx='Running 1s test @ http://127.0.0.1:18189/missing
  1 threads and 2 connections
  7123 requests in 1.12s, 1.20MB read
  Non-2xx or 3xx responses: 7123
Requests/sec:   6370.14'
wrk_sockerr='  2 threads and 64 connections
  9120 requests in 1.00s, 1.81MB read
  Socket errors: connect 0, read 12, write 0, timeout 3
Requests/sec:   9120.00'
wrk_none='  2 threads and 64 connections
  0 requests in 1.00s, 0.00B read
Requests/sec:      0.00'
accepts "wrk clean" check_wrk t "$wrk_clean"
refuses "wrk non-2xx" check_wrk t "$wrk_non2xx"
refuses "wrk socket errors" check_wrk t "$wrk_sockerr"
refuses "wrk no request" check_wrk t "$wrk_none"

h2_clean='Application protocol: h2
requests: 75620 total, 75620 started, 75620 done, 75620 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 75620 2xx, 0 3xx, 0 4xx, 0 5xx'
h2_failed='Application protocol: h2c
requests: 20 total, 2 started, 0 done, 0 succeeded, 20 failed, 20 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx'
h2_5xx='Application protocol: h2
requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 100 5xx'
accepts "h2load clean" check_h2load t "$h2_clean" h2
refuses "h2load failed/errored" check_h2load t "$h2_failed" h2c
refuses "h2load 5xx" check_h2load t "$h2_5xx" h2
refuses "h2load fell back to http/1.1" check_h2load t "${h2_clean/h2$'\n'/http/1.1$'\n'}" h2

# Body sizes: h2load's DATA bytes (the third figure of "traffic:") and wrk-bytes.lua's line.
h2_body='requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed, 0 errored, 0 timeout
traffic: 654.30KB (670000) total, 166.02KB (170000) headers (space savings 35.12%), 468.75KB (480000) data'
h2_body_partial='requests: 1000 total, 1010 started, 1000 done, 1000 succeeded, 0 failed, 0 errored, 0 timeout
traffic: 659.00KB (674800) total, 166.02KB (170000) headers (space savings 35.12%), 473.44KB (484800) data'
h2_body_short='requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed, 0 errored, 0 timeout
traffic: 283.20KB (290000) total, 166.02KB (170000) headers (space savings 35.12%), 117.19KB (120000) data'
accepts "h2load body sizes exact" check_h2load_body t "$h2_body" 480 160
accepts "h2load body sizes with streams cut at the end" check_h2load_body t "$h2_body_partial" 480 160
refuses "h2load bodies too short" check_h2load_body t "$h2_body_short" 480 160
refuses "h2load bodies of the 480 B object where 100 KB was asked" check_h2load_body t "$h2_body" 102400 160
refuses "h2load without a traffic line" check_h2load_body t "$h2_clean" 480 160
accepts "wrk body sizes" check_wrk_body t "$wrk_clean"$'\n''wrk-bytes 25600000 32000' 480 64
refuses "wrk bodies too short (a 404 page)" check_wrk_body t "$wrk_clean"$'\n''wrk-bytes 3200000 32000' 480 64
refuses "wrk bodies too long (100 KB where 480 B was asked)" check_wrk_body t "$wrk_clean"$'\n''wrk-bytes 3300000000 32000' 480 64
refuses "wrk without wrk-bytes.lua" check_wrk_body t "$wrk_clean" 480 64

# The Go load generators' line (bench/loadstat), as bench/h3load and bench/grpcload print it.
lg_clean='requests=51234 ok=51234 bad=0 errors=0 timeouts=0 rps=10246.8 p50_ms=1.234 p99_ms=4.567 elapsed=5.01s proto=HTTP/3.0'
accepts "loadgen clean" check_loadgen t "$lg_clean"
refuses "loadgen bad answers (non-OK gRPC status)" check_loadgen t "${lg_clean/bad=0/bad=3}"$'\n''grpcload: 3 of 51237 requests failed; first: status Unavailable: no healthy upstream'
refuses "loadgen errors" check_loadgen t "${lg_clean/errors=0/errors=1}"
refuses "loadgen timeouts" check_loadgen t "${lg_clean/timeouts=0/timeouts=2}"
refuses "loadgen no request" check_loadgen t 'requests=0 ok=0 bad=0 errors=0 timeouts=0 rps=0.0 p50_ms=0.000 p99_ms=0.000 elapsed=0.00s'
refuses "loadgen no line" check_loadgen t 'h3load: bounded runs only: -c 0: want 1..256 connections'
if [ "$(kv p99_ms "$lg_clean")" = 4.567 ] && [ "$(kv ok "$lg_clean")" = 51234 ] && [ "$(kv proto "$lg_clean")" = HTTP/3.0 ]; then
	echo "ok   kv reads key=value lines"
else
	echo "FAIL kv: p99_ms=$(kv p99_ms "$lg_clean") ok=$(kv ok "$lg_clean")" >&2
	failures=$((failures + 1))
fi
if [ "$(us_per "$(getconf CLK_TCK)" 1000)" = 1000.0 ] && [ "$(proc_tree $$ | head -1)" = $$ ]; then
	echo "ok   us_per and proc_tree"
else
	echo "FAIL us_per $(us_per "$(getconf CLK_TCK)" 1000), proc_tree $(proc_tree $$ | head -1)" >&2
	failures=$((failures + 1))
fi

dns_clean='  Queries sent:         89144
  Queries completed:    89144 (100.00%)
  Queries lost:         0 (0.00%)
  Response codes:       NOERROR 78005 (87.50%), NXDOMAIN 11139 (12.50%)'
dns_lost='  Queries sent:         100
  Queries completed:    0 (0.00%)
  Queries lost:         100 (100.00%)
  Response codes:       '
dns_servfail='  Queries sent:         1000
  Queries completed:    1000 (100.00%)
  Queries lost:         0 (0.00%)
  Response codes:       NOERROR 900 (90.00%), SERVFAIL 100 (10.00%)'
accepts "dnsperf clean" check_dnsperf t "$dns_clean" "NOERROR NXDOMAIN"
refuses "dnsperf lost" check_dnsperf t "$dns_lost" "NOERROR"
refuses "dnsperf SERVFAIL" check_dnsperf t "$dns_servfail" "NOERROR NXDOMAIN"
refuses "dnsperf NXDOMAIN where none is expected" check_dnsperf t "$dns_clean" "NOERROR"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; if [ -n "${origin:-}" ]; then kill "$origin" 2>/dev/null || true; fi' EXIT
echo '{"old": 1}' >"$tmp/out.json"
refuses "write_json empty figure" write_json "$tmp/out.json" <<<'{"a": , "b": 2}'
refuses "write_json nan" write_json "$tmp/out.json" <<<'{"a": nan}'
if [ "$(cat "$tmp/out.json")" = '{"old": 1}' ] && [ "$(ls "$tmp")" = out.json ]; then
	echo "ok   write_json refused: the old file is untouched and no temp file is left"
else
	echo "FAIL write_json left $(ls "$tmp") with $(cat "$tmp/out.json")" >&2
	failures=$((failures + 1))
fi
accepts "write_json clean" write_json "$tmp/out.json" <<<'{"a": 1.5, "b": "x", "smoke": true}'

# ports_free against a real listener: the first free port of 18189..18199.
port=
for p in $(seq 18189 18199); do [ -z "$(port_holder "$p")" ] && { port=$p; break; }; done
[ -n "$port" ] || { echo "FAIL no free port in 18189..18199" >&2; exit 1; }
go build -o "$tmp/origin" ./bench/edge
"$tmp/origin" -listen "127.0.0.1:$port" &
origin=$!
ready "the test origin" 10 http_200 "http://127.0.0.1:$port/small"
msg=$( (ports_free "$port") 2>&1) && { echo "FAIL ports_free accepted a taken port" >&2; failures=$((failures + 1)); }
if grep -q "port $port is taken by origin (pid $origin)" <<<"$msg"; then
	echo "ok   ports_free refused and named the holder: $(grep FAILED <<<"$msg")"
else
	echo "FAIL ports_free did not name origin (pid $origin): $msg" >&2
	failures=$((failures + 1))
fi
refuses "ready on a 404" ready "a 404 path" 1 http_200 "http://127.0.0.1:$port/missing"
kill "$origin"
wait "$origin" 2>/dev/null || true
origin=
accepts "ports_free after it stopped" ports_free "$port"

[ "$failures" = 0 ] || { echo "lib_test: $failures failed" >&2; exit 1; }
echo "lib_test: all passed"
