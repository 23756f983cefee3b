#!/usr/bin/env bash
# bench/dnsscale.sh — many small zones, as DNS hosters run them: ZONES zones (default 100,000) of
# four records each (SOA, NS, ns1 A, www A), generated files, loaded by switchyard (with a catalog
# zone listing them, `catalog:`), NSD and Knot in turn on loopback. For each server:
#   - start_s: from exec until one dnsperf pass over every zone's www A gets NOERROR for each (no
#     lost query); passes repeat until then (the figure includes the last pass, about
#     ZONES / q/s), bounded by START_LIMIT seconds (a server that needs longer fails the run);
#   - per-zone memory: the server's PSS (every process) with the ZONES zones, less its PSS with
#     the same records in one zone (www.zN, ns1.zN A and a TXT at zN for the NS), each taken after
#     a dnsperf pass over every www name, over ZONES: the cost of a zone above its records (target
#     <= 2 KB for switchyard);
#   - reload_ms: one zone's file gets a new serial and record, then the server is told to reload
#     that zone alone (`switchyard dns reload --zone`, `knotc zone-reload`, `nsd-control reload
#     ZONE`; the times include the client's start) and the time until the new record is
#     served is taken; meanwhile dnsperf asks 1,000 other zones and must lose nothing and get
#     NOERROR only (the others are not stalled);
#   - update_ms (switchyard, Knot): the median of 20 RFC 2136 updates (bench/dnsupdate, TSIG) to
#     one zone, acknowledged, then checked served.
# One measurement per server (no rounds: a start is the figure), the JSON (bench/out/dnsscale.json,
# flat) only when every check passed. BENCH_SMOKE=1: 2,000 zones. Bounded: the zone set is made
# once (100,000 small files take about 400 MB of 4 KiB blocks in /tmp), removed at exit with every process started.
# Run from the repository root after `go build -o bin/switchyard ./cmd/switchyard` (make bench-dnsscale).
set -euo pipefail

ZONES=${ZONES:-100000}
START_LIMIT=${START_LIMIT:-240}
BIN=${BIN:-bin/switchyard}
OUT=bench/out/dnsscale.json
PORT_SY=25360 PORT_NSD=25361 PORT_KNOT=25362 PORT_SY_ADMIN=25363 # the last: dns run --metrics, /reload

BENCH=dnsscale
. "$(dirname "$0")/lib.sh"
if is_smoke; then ZONES=2000; fi
require_binary "$BIN" dnsscale
ensure_packages nsd knot dnsperf dnsutils
ports_free $PORT_SY $PORT_NSD $PORT_KNOT $PORT_SY_ADMIN

WORK=$(mktemp -d /tmp/switchyard-dnsscale.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
go build -o "$WORK/dnsupdate" ./bench/dnsupdate || bench_fail "could not build bench/dnsupdate"

MID=$(( ZONES / 2 )) # the zone reloaded
UPD_SECRET=$(head -c 32 /dev/urandom | base64)
mkdir -p "$WORK/zones" "$WORK/big" "$WORK/knot" "$WORK/knot-big" "$WORK/sy"

# zonefile N SERIAL [EXTRA] writes zone N's file.
zonefile() {
  printf '$ORIGIN z%s.scale.test.\n$TTL 300\n@ IN SOA ns1 hostmaster %s 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.1\n%s' \
    "$1" "$2" "${3:-}" >"$WORK/zones/z$1.scale.test.zone"
}
echo "dnsscale bench: making $ZONES zones"
awk -v n="$ZONES" -v d="$WORK/zones" 'BEGIN { for (i = 1; i <= n; i++) { f = d "/z" i ".scale.test.zone"
  printf "$ORIGIN z%d.scale.test.\n$TTL 300\n@ IN SOA ns1 hostmaster 1 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.1\n", i > f; close(f) } }'
# The same records in one zone: the baseline of the per-zone memory.
awk -v n="$ZONES" 'BEGIN { print "$ORIGIN scale.test.\n$TTL 300\n@ IN SOA ns1 hostmaster 1 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.53"
  for (i = 1; i <= n; i++) printf "z%d IN TXT \"ns1.z%d\"\nns1.z%d IN A 192.0.2.53\nwww.z%d IN A 192.0.2.1\n", i, i, i, i }' >"$WORK/big/scale.test.zone"
awk -v n="$ZONES" 'BEGIN { for (i = 1; i <= n; i++) printf "www.z%d.scale.test A\n", i }' >"$WORK/all.txt"
awk -v n="$ZONES" -v m="$MID" 'BEGIN { for (i = 1; i <= 1000; i++) { z = 1 + (i * 7919) % n; if (z != m) printf "www.z%d.scale.test A\n", z } }' >"$WORK/others.txt"

# switchyard: every zone from its file, a catalog listing them, zone 1 taking updates.
{ printf 'listen: 127.0.0.1:%s\nstate_dir: %s/sy\n' $PORT_SY "$WORK"
  printf 'tsig_keys: [{name: upd, algorithm: hmac-sha256, secret: "%s"}]\n' "$UPD_SECRET"
  printf 'catalog: {zone: catalog.invalid., transfer: {allow: [127.0.0.1]}}\nzones:\n'
  printf '  - {origin: z1.scale.test., file: zones/z1.scale.test.zone, update: {journal: sy/z1.updates, allow: [{key: upd}]}}\n'
  awk -v n="$ZONES" 'BEGIN { for (i = 2; i <= n; i++) printf "  - {origin: z%d.scale.test., file: zones/z%d.scale.test.zone}\n", i, i }'
} >"$WORK/switchyard.yaml"
head -c 24 /dev/urandom | base64 >"$WORK/sy.token" # dns reload's admin token (dns run --token-file)
printf 'listen: 127.0.0.1:%s\nstate_dir: %s/sy\nzones:\n  - {origin: scale.test., file: big/scale.test.zone}\n' $PORT_SY "$WORK" >"$WORK/switchyard-big.yaml"

# NSD: one process serving (server-count 1), a control socket for the one-zone reload.
nsdconf() { # zones-file port -> the config
  cat <<CONF
server:
  ip-address: 127.0.0.1@$PORT_NSD
  server-count: 1
  username: ""
  chroot: ""
  zonesdir: "$WORK"
  pidfile: "$WORK/nsd.pid"
  xfrdfile: "$WORK/xfrd.state"
  xfrdir: "$WORK"
  zonelistfile: "$WORK/zone.list"
  database: ""
  logfile: "$WORK/nsd.log"
  verbosity: 0
  rrl-ratelimit: 0
remote-control:
  control-enable: yes
  control-interface: $WORK/nsd.ctl
CONF
  cat "$1"
}
awk -v n="$ZONES" 'BEGIN { for (i = 1; i <= n; i++) printf "zone:\n  name: z%d.scale.test\n  zonefile: zones/z%d.scale.test.zone\n", i, i }' >"$WORK/nsd-zones"
printf 'zone:\n  name: scale.test\n  zonefile: big/scale.test.zone\n' >"$WORK/nsd-big-zones"
nsdconf "$WORK/nsd-zones" >"$WORK/nsd.conf"
nsdconf "$WORK/nsd-big-zones" >"$WORK/nsd-big.conf"

# Knot: the zone files as they are (no journal, never written back), zone 1 taking updates.
knotconf() { # rundir zonesdir -> the config up to its zone list
  cat <<CONF
server:
  rundir: "$1"
  listen: 127.0.0.1@$PORT_KNOT
  udp-workers: 2
  tcp-workers: 1
  background-workers: 2
log:
  - target: stderr
    any: error
database:
  storage: "$1"
key:
  - id: upd
    algorithm: hmac-sha256
    secret: $UPD_SECRET
acl:
  - id: update
    key: upd
    action: update
template:
  - id: default
    storage: "$2"
    zonefile-sync: -1
    journal-content: none
zone:
CONF
}
{ knotconf "$WORK/knot" "$WORK/zones"
  printf '  - domain: z1.scale.test\n    acl: update\n    journal-content: changes\n'
  awk -v n="$ZONES" 'BEGIN { for (i = 2; i <= n; i++) printf "  - domain: z%d.scale.test\n", i }'
} >"$WORK/knot.conf"
{ knotconf "$WORK/knot-big" "$WORK/big"; printf '  - domain: scale.test\n'; } >"$WORK/knot-big.conf"

start() { # name -> starts it in the background (PID, T0 in ms)
  T0=$(date +%s%3N)
  case $1 in
  switchyard) "$BIN" dns run --config "$WORK/switchyard.yaml" --metrics 127.0.0.1:$PORT_SY_ADMIN \
    --token-file "$WORK/sy.token" >"$WORK/sy.log" 2>&1 & ;;
  switchyard-big) "$BIN" dns run --config "$WORK/switchyard-big.yaml" >"$WORK/sy-big.log" 2>&1 & ;;
  nsd) nsd -d -c "$WORK/nsd.conf" >"$WORK/nsd.out" 2>&1 & ;;
  nsd-big) nsd -d -c "$WORK/nsd-big.conf" >"$WORK/nsd-big.out" 2>&1 & ;;
  knot) knotd -c "$WORK/knot.conf" >"$WORK/knot.out" 2>&1 & ;;
  knot-big) knotd -c "$WORK/knot-big.conf" >"$WORK/knot-big.out" 2>&1 & ;;
  esac
  PID=$!
  PIDS+=("$PID")
}
stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
port_of() { case $1 in switchyard*) echo $PORT_SY ;; nsd*) echo $PORT_NSD ;; knot*) echo $PORT_KNOT ;; esac; }
LOGS="$WORK/*.log $WORK/*.out"

# serves_all PORT succeeds when one dnsperf pass over every zone gets NOERROR for each.
serves_all() {
  local out codes
  out=$(dnsperf -s 127.0.0.1 -p "$1" -d "$WORK/all.txt" -n 1 -c 4 -q 100 -t 2 2>&1) || { echo "dnsperf failed"; return 1; }
  codes=$(grep 'Response codes:' <<<"$out" | sed 's/.*Response codes://' | tr ',' '\n' | awk '{print $1}' | sort -u | tr -d '\n')
  [ "$(awk '/Queries completed:/ {print $3}' <<<"$out")" = "$ZONES" ] && [ "$codes" = NOERROR ] ||
    { echo "$(grep -E 'Queries (completed|lost)|Response codes' <<<"$out" | tr -s ' \n' ' ')"; return 1; }
}
# pss_kib prints the proportional set size (KiB) of $PID and its descendants (NSD's processes
# share pages; PSS counts each once).
pss_kib() {
  local t=0 p
  for p in $(proc_tree "$PID"); do t=$(( t + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0) )); done
  echo "$t"
}

declare -A R
# The big zone's run: serving, then its memory.
baseline() { # name
  local port
  port=$(port_of "$1")
  start "$1-big"
  ready "$1 (one zone)" "$START_LIMIT" sh -c "dig +short +time=1 +tries=1 @127.0.0.1 -p $port www.z$ZONES.scale.test A | grep -q 192.0.2.1"
  # The same queries as the zones' run (www.zN is a name of the one zone too): what serving them
  # leaves (an answer cache, a server's buffers) is then in both figures, not counted per zone.
  ready "$1 (one zone, every name)" "$START_LIMIT" serves_all "$port"
  sleep 2
  R[$1/pss_big]=$(pss_kib)
  stop
}

# reload_one NAME: zone MID gains a record and a serial; the server is told; the time until it is
# served, with dnsperf on other zones meanwhile.
reload_one() {
  local port t0 out
  port=$(port_of "$1")
  zonefile "$MID" 2 'new IN A 192.0.2.99
'
  dnsperf -s 127.0.0.1 -p "$port" -d "$WORK/others.txt" -l 4 -c 2 -q 20 -t 2 >"$WORK/others.out" 2>&1 &
  local dp=$!
  sleep 1
  t0=$(date +%s%3N)
  case $1 in
  switchyard) "$BIN" dns reload --metrics 127.0.0.1:$PORT_SY_ADMIN --token-file "$WORK/sy.token" --zone "z$MID.scale.test." >/dev/null ;;
  knot) knotc -s "$WORK/knot/knot.sock" zone-reload "z$MID.scale.test." >/dev/null ;;
  nsd) nsd-control -c "$WORK/nsd.conf" reload "z$MID.scale.test" >/dev/null ;;
  esac
  ready "$1's reload of z$MID" 60 sh -c "dig +short +time=1 +tries=1 @127.0.0.1 -p $port new.z$MID.scale.test A | grep -q 192.0.2.99"
  R[$1/reload_ms]=$(( $(date +%s%3N) - t0 ))
  wait "$dp" || bench_fail "$1: dnsperf on the other zones during the reload failed: $(cat "$WORK/others.out")"
  out=$(cat "$WORK/others.out")
  check_dnsperf "$1: the other zones during the reload" "$out" NOERROR
  R[$1/others_qps]=$(awk '/Queries per second:/ {printf "%.0f", $4}' <<<"$out")
  zonefile "$MID" 1
}

# update_one NAME: 20 updates to zone 1, one at a time; the median acknowledgement, then served.
update_one() {
  local port out
  port=$(port_of "$1")
  out=$("$WORK/dnsupdate" -addr "127.0.0.1:$port" -zone z1.scale.test. -key upd -secret "$UPD_SECRET" -names 4 \
    -c 1 -m 1 -n 21 -d 20s -timeout 5s 2>&1) || bench_fail "$1: dnsupdate failed: $out"
  check_loadgen "$1 updates to z1" "$out"
  # Update 20 (the last of 21, counted from 0) set u0 to 10.0.0.20.
  ready "$1's update of z1" 10 sh -c "dig +short +time=1 +tries=1 @127.0.0.1 -p $port u0.z1.scale.test A | grep -qx 10.0.0.20"
  R[$1/update_ms]=$(kv p50_ms "$out")
}

for s in switchyard nsd knot; do
  port=$(port_of "$s")
  start "$s"
  ready "$s (z$ZONES)" "$START_LIMIT" sh -c "dig +short +time=1 +tries=1 @127.0.0.1 -p $port www.z$ZONES.scale.test A | grep -q 192.0.2.1"
  ready "$s (every zone)" "$START_LIMIT" serves_all "$port"
  R[$s/start_ms]=$(( $(date +%s%3N) - T0 ))
  if [ "$s" = switchyard ]; then
    n=$(dig +time=5 +tries=1 @127.0.0.1 -p $PORT_SY catalog.invalid. AXFR 2>/dev/null | awk '$4 == "PTR"' | wc -l)
    [ "$n" = "$ZONES" ] || bench_fail "switchyard's catalog lists $n zones, not $ZONES"
  fi
  sleep 2
  R[$s/pss]=$(pss_kib)
  echo "  $s: serves all $ZONES zones $(awk -v m="${R[$s/start_ms]}" 'BEGIN{printf "%.1f", m/1000}') s after start, PSS $(( R[$s/pss] / 1024 )) MiB"
  reload_one "$s"
  echo "  $s: one zone reloaded and served in ${R[$s/reload_ms]} ms, others answered meanwhile at ${R[$s/others_qps]} q/s, none lost"
  if [ "$s" != nsd ]; then
    update_one "$s"
    echo "  $s: one zone's update acknowledged in ${R[$s/update_ms]} ms (median of 20), served"
  fi
  stop
  baseline "$s"
  R[$s/zone_bytes]=$(awk -v a="${R[$s/pss]}" -v b="${R[$s/pss_big]}" -v n="$ZONES" 'BEGIN{printf "%.0f", (a - b) * 1024 / n}')
  echo "  $s: the same records in one zone: PSS $(( R[$s/pss_big] / 1024 )) MiB; ${R[$s/zone_bytes]} bytes per zone above its records"
done

secs() { awk -v m="$1" 'BEGIN{printf "%.2f", m/1000}'; }
write_json "$OUT" <<JSON
{"zones": $ZONES, "switchyard_start_s": $(secs "${R[switchyard/start_ms]}"), "nsd_start_s": $(secs "${R[nsd/start_ms]}"), "knot_start_s": $(secs "${R[knot/start_ms]}"), "switchyard_pss_mib": $(( R[switchyard/pss] / 1024 )), "nsd_pss_mib": $(( R[nsd/pss] / 1024 )), "knot_pss_mib": $(( R[knot/pss] / 1024 )), "switchyard_zone_bytes": ${R[switchyard/zone_bytes]}, "nsd_zone_bytes": ${R[nsd/zone_bytes]}, "knot_zone_bytes": ${R[knot/zone_bytes]}, "switchyard_reload_ms": ${R[switchyard/reload_ms]}, "nsd_reload_ms": ${R[nsd/reload_ms]}, "knot_reload_ms": ${R[knot/reload_ms]}, "switchyard_reload_others_qps": ${R[switchyard/others_qps]}, "nsd_reload_others_qps": ${R[nsd/others_qps]}, "knot_reload_others_qps": ${R[knot/others_qps]}, "switchyard_update_ms": ${R[switchyard/update_ms]}, "knot_update_ms": ${R[knot/update_ms]}, "smoke": $(smoke_json)}
JSON
