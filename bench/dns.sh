#!/usr/bin/env bash
# bench/dns.sh — dnsperf against switchyard, NSD and Knot serving the same zone on loopback, in one
# run, alternating rounds. Prints a table and writes a flat JSON object to bench/out/dns.json, only
# when every round passed the checks of bench/lib.sh: ports free, each server answering before its
# rounds, no lost (timed-out) query and no response code other than NOERROR (and NXDOMAIN for the
# one missing name of the static set) in any round. BENCH_SMOKE=1: one round of 1 s per phase.
# Bounded: ROUNDS x servers x SECONDS of load per phase (defaults 3 x 4 x 5 s, two phases; the
# servers: switchyard, switchyard with udp.xdp: generic, NSD, Knot), plus
# ROUNDS x 2 x SECONDS for switchyard on one core and on two (taskset), plus the DNSSEC phases:
# ROUNDS x SECONDS of DO=1 queries to switchyard signing the zone online (static names, and
# dynamic names with ECS) and to Knot serving the same zone signed (its automatic signing), so
# signed q/s sits beside unsigned in the same run (signed_qps, signed_ratio_vs_unsigned).
# Denial phase: ROUNDS x 3 x 2 x SECONDS of DO=1 queries (static and a negative mix) to switchyard
# with compact denial, with NSEC3 (denial: nsec3), and to Knot signing with NSEC3.
# Update phase: ROUNDS x 2 runs of bench/dnsupdate (RFC 2136 with TSIG, at most UPDATES updates
# and SECONDS each) to switchyard, transferred to a Knot secondary (NOTIFY, IXFR), and to Knot as
# the primary; then the time until the secondary serves the last serial (bounded: 30 s).
# Stall phase (switchyard only): DO=1 queries at a fixed rate (bench/dnsquery, STALL_RATE a
# second) to a zone whose key policy rolls its ZSK every STALL_ZSK_LIFETIME seconds; per round the
# p99 of a quiet window of STALL_SECONDS, then during a burst of STALL_UPDATES updates, another
# quiet window, then during a whole ZSK rollover (about 8 s); bounded: ROUNDS x STALL_ZSK_LIFETIME.
# PHASES (default: all) picks phases by name (static signed denial update cores stall), e.g.
# PHASES=stall; a partial run writes its phases' keys to bench/out/dns-partial.json.
# Run from the repository root after `go build -o bin/switchyard ./cmd/switchyard` (make bench-dns).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CLIENTS=${CLIENTS:-4}
# 100 outstanding queries: with 200, a server socket's default receive buffer (212,992 bytes,
# fewer than 200 small datagrams) overflowed whenever the server was descheduled on the shared
# 2 cores, and the kernel dropped queries (Udp RcvbufErrors) that dnsperf then counted lost.
OUTSTANDING=${OUTSTANDING:-100}
# dnsperf's own sockets' buffers, in KB: its default (the kernel's 208 KB) holds fewer than 100
# signed negative answers (about 2.3 KB of buffer each), so when dnsperf was descheduled with the
# outstanding answers on one socket the kernel dropped some and dnsperf counted them lost (CI,
# NSEC3 negative DO=1: 3 lost, "receive-buffer drops: 3", the server's own 4 MiB buffer could not
# have filled with 100 queries outstanding).
CLIENT_BUFFER_KB=${CLIENT_BUFFER_KB:-1024}
# The update phase's bench/dnsupdate: connections (one update at a time on each) and the budget.
UPDATE_CONNS=${UPDATE_CONNS:-4}
UPDATES=${UPDATES:-50000}
BIN=${BIN:-bin/switchyard}
OUT=bench/out/dns.json
PORT_SY=${PORT_SY:-25353} PORT_NSD=${PORT_NSD:-25354} PORT_KNOT=${PORT_KNOT:-25355} PORT_METRICS=${PORT_METRICS:-25356}
ALL_PHASES="static signed denial update cores stall"
PHASES=${PHASES:-$ALL_PHASES}
# The stall phase: the offered rate (well below saturation), the sockets it uses, the quiet and
# update windows, the updates of a burst and the ZSK lifetime of its key policy.
STALL_RATE=${STALL_RATE:-2000}
STALL_CONNS=${STALL_CONNS:-16}
STALL_SECONDS=${STALL_SECONDS:-5}
STALL_UPDATES=${STALL_UPDATES:-1000}
STALL_ZSK_LIFETIME=${STALL_ZSK_LIFETIME:-45}

BENCH=dns
. "$(dirname "$0")/lib.sh"
if is_smoke; then ROUNDS=1 SECONDS_PER_RUN=1 STALL_SECONDS=2; fi
for p in $PHASES; do [[ " $ALL_PHASES " == *" $p "* ]] || bench_fail "PHASES: unknown phase $p; use some of: $ALL_PHASES"; done
# rounds_of PHASE prints the round numbers of PHASE: none when PHASES leaves it out.
rounds_of() { if [[ " $PHASES " == *" $1 "* ]]; then seq "$ROUNDS"; fi; }
require_binary "$BIN" dns

ensure_packages nsd knot dnsperf dnsutils bind9-dnsutils
WORK_BUILD=$(mktemp -d /tmp/switchyard-dns-bench-build.XXXXXX)
go build -o "$WORK_BUILD/dnsupdate" ./bench/dnsupdate || bench_fail "could not build bench/dnsupdate"
go build -o "$WORK_BUILD/dnsquery" ./bench/dnsquery || bench_fail "could not build bench/dnsquery"
ports_free $PORT_SY $PORT_NSD $PORT_KNOT $PORT_METRICS

WORK=$(mktemp -d /tmp/switchyard-dns-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK" "$WORK_BUILD"
}
trap cleanup EXIT

# The same zone for the three servers. The dynamic names exist as plain A records for NSD and Knot;
# switchyard answers them through its policies.
cat > "$WORK/bench.test.zone" <<'ZONE'
$ORIGIN bench.test.
$TTL 300
@    IN SOA ns1.bench.test. hostmaster.bench.test. 1 3600 600 604800 60
@    IN NS  ns1.bench.test.
ns1  IN A   127.0.0.1
www  IN A   192.0.2.1
www  IN AAAA 2001:db8::1
api  IN A   192.0.2.2
cdn  IN CNAME www
@    IN MX  10 mail
mail IN A   192.0.2.25
@    IN TXT "v=spf1 -all"
ZONE
# NSD and Knot get static records for the dynamic names.
cp "$WORK/bench.test.zone" "$WORK/peer.zone"
printf 'app IN A 198.51.100.34\nw   IN A 198.51.100.34\n' >> "$WORK/peer.zone"

cat > "$WORK/switchyard.yaml" <<YAML
listen: 127.0.0.1:$PORT_SY
groups:
  g1: [10.1.0.0/16]
  g2: [10.2.0.0/16]
zones:
  - origin: bench.test.
    file: bench.test.zone
    names:
      - name: app
        ttl: 30
        policy: geolocation
        geo: {g1: [b34, b06], g2: [b35, b34], default: [b06]}
        sites:
          - {name: b34, addresses: [198.51.100.34]}
          - {name: b35, addresses: [198.51.100.35]}
          - {name: b06, addresses: [198.51.100.6]}
      - name: w
        ttl: 30
        policy: weighted
        sites:
          - {name: b34, addresses: [198.51.100.34], weight: 5}
          - {name: b35, addresses: [198.51.100.35], weight: 3}
          - {name: b06, addresses: [198.51.100.6], weight: 2}
YAML

# The XDP variant (udp.xdp: generic on lo, docs/dns.md "XDP answer path"): the same server with
# its static answers sent by the XDP program; the row beside switchyard without it.
printf 'udp: {xdp: generic}\n' | cat "$WORK/switchyard.yaml" - >"$WORK/switchyard-xdp.yaml"

# The signed variant: the same zone with a CSK made by `switchyard dns keygen`, signed online.
"$BIN" dns keygen --zone bench.test. --out "$WORK/bench.key" >"$WORK/keygen.out"
sed 's|^    file: bench.test.zone$|    file: bench.test.zone\n    dnssec: {key_file: bench.key}|' "$WORK/switchyard.yaml" >"$WORK/switchyard-signed.yaml"
grep -q 'dnssec:' "$WORK/switchyard-signed.yaml" || bench_fail "could not write the signed switchyard config"
printf 'trust-anchors { bench.test. static-key 257 3 13 "%s"; };\n' \
  "$(awk '$4 == "DNSKEY" {print $8; exit}' "$WORK/keygen.out")" >"$WORK/anchor"
# The NSEC3 variant: the same key, denial by NSEC3 records made per answer (denial: nsec3).
sed 's|dnssec: {key_file: bench.key}|dnssec: {key_file: bench.key, denial: nsec3}|' "$WORK/switchyard-signed.yaml" >"$WORK/switchyard-nsec3.yaml"
grep -q 'denial: nsec3' "$WORK/switchyard-nsec3.yaml" || bench_fail "could not write the NSEC3 switchyard config"

cat > "$WORK/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1@$PORT_NSD
  server-count: 2
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
  # NSD rate-limits responses by default; a benchmark from one address would hit it.
  rrl-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: bench.test
  zonefile: peer.zone
CONF

mkdir -p "$WORK/knot"
cat > "$WORK/knot.conf" <<CONF
server:
  rundir: "$WORK/knot"
  listen: 127.0.0.1@$PORT_KNOT
  udp-workers: 2
  tcp-workers: 1
  background-workers: 1
log:
  - target: stderr
    any: error
database:
  storage: "$WORK/knot"
template:
  - id: default
    storage: "$WORK"
    zonefile-sync: -1
    journal-content: none
zone:
  - domain: bench.test
    file: peer.zone
CONF

# Knot signing the same zone (automatic DNSSEC signing: it signs the whole zone at load and
# answers DO=1 queries from the signed copy), the peer for the signed phase.
mkdir -p "$WORK/knot-signed"
sed -e "s|$WORK/knot\"|$WORK/knot-signed\"|" -e 's|    journal-content: none|    journal-content: all\n    zonefile-load: difference-no-serial|' \
  -e 's|    file: peer.zone|    file: peer.zone\n    dnssec-signing: on|' "$WORK/knot.conf" >"$WORK/knot-signed.conf"
# Knot signing with NSEC3 (RFC 9276's parameters, as switchyard's: no iterations, no salt): the
# peer of the denial phase.
mkdir -p "$WORK/knot-nsec3"
# (Knot wants a policy defined before the zones that name it.)
sed -e "s|$WORK/knot-signed\"|$WORK/knot-nsec3\"|" -e 's|    dnssec-signing: on|    dnssec-signing: on\n    dnssec-policy: nsec3|' \
  -e 's|^template:$|policy:\n  - id: nsec3\n    nsec3: on\n    nsec3-iterations: 0\n    nsec3-salt-length: 0\ntemplate:|' \
  "$WORK/knot-signed.conf" >"$WORK/knot-nsec3.conf"
grep -q 'dnssec-policy: nsec3' "$WORK/knot-nsec3.conf" || bench_fail "could not write the NSEC3 Knot config"

# The update phase: switchyard takes RFC 2136 updates signed with the key upd and hands each new
# serial to a Knot secondary (NOTIFY, then IXFR); Knot as the primary takes the same updates.
UPD_SECRET=$(head -c 32 /dev/urandom | base64)
{ sed -n '1p' "$WORK/switchyard.yaml"
  printf 'tsig_keys:\n  - {name: upd, algorithm: hmac-sha256, secret: "%s"}\n' "$UPD_SECRET"
  sed -e '1d' -e 's|^    file: bench.test.zone$|    file: bench.test.zone\n    transfer: {allow: [127.0.0.1], notify: ["127.0.0.1:'$PORT_KNOT'"], journal: 1000}\n    update: {allow: [{key: upd}]}|' "$WORK/switchyard.yaml"
} >"$WORK/switchyard-update.yaml"
grep -q 'update: {allow' "$WORK/switchyard-update.yaml" || bench_fail "could not write the update switchyard config"
mkdir -p "$WORK/knot-secondary" "$WORK/knot-update"
cp "$WORK/peer.zone" "$WORK/knot-update/peer.zone"
cat > "$WORK/knot-secondary.conf" <<CONF
server:
  rundir: "$WORK/knot-secondary"
  listen: 127.0.0.1@$PORT_KNOT
  udp-workers: 2
  tcp-workers: 1
  background-workers: 1
log:
  - target: stderr
    any: error
database:
  storage: "$WORK/knot-secondary"
remote:
  - id: switchyard
    address: 127.0.0.1@$PORT_SY
acl:
  - id: notify
    address: 127.0.0.1
    action: notify
template:
  - id: default
    storage: "$WORK/knot-secondary"
    zonefile-sync: -1
zone:
  - domain: bench.test
    master: switchyard
    acl: notify
CONF
cat > "$WORK/knot-update.conf" <<CONF
server:
  rundir: "$WORK/knot-update"
  listen: 127.0.0.1@$PORT_KNOT
  udp-workers: 2
  tcp-workers: 1
  background-workers: 1
log:
  - target: stderr
    any: error
database:
  storage: "$WORK/knot-update"
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
    storage: "$WORK/knot-update"
    zonefile-sync: -1
zone:
  - domain: bench.test
    file: peer.zone
    acl: update
CONF

# The stall phase's server: the zone with TTLs of 1 s, signed by a key policy whose intervals are
# seconds (Dprp 1 s, Ipub 2 s, ZSK Iret 2 s), so a ZSK rollover runs on the wall clock every
# STALL_ZSK_LIFETIME seconds, and taking updates signed with the key upd.
sed -e 's/^\$TTL 300$/$TTL 1/' -e 's/ 604800 60$/ 604800 1/' "$WORK/bench.test.zone" >"$WORK/stall.zone"
cat > "$WORK/switchyard-stall.yaml" <<YAML
listen: 127.0.0.1:$PORT_SY
tsig_keys:
  - {name: upd, algorithm: hmac-sha256, secret: "$UPD_SECRET"}
zones:
  - origin: bench.test.
    file: stall.zone
    update: {allow: [{key: upd}]}
    dnssec:
      key_dir: stall-keys
      dnskey_ttl: 1
      refresh: 1m
      validity: 2h
      policy: {scheme: ksk_zsk, zsk_lifetime: ${STALL_ZSK_LIFETIME}s, ksk_lifetime: 8760h, propagation_delay: 1s, zone_max_ttl: 1, parent_ds_ttl: 1}
YAML

# Query files: static names (the NSD comparison) and dynamic names.
cat > "$WORK/static.txt" <<'Q'
www.bench.test A
www.bench.test AAAA
api.bench.test A
cdn.bench.test A
bench.test MX
bench.test TXT
missing.bench.test A
www.bench.test MX
Q
printf 'app.bench.test A\nw.bench.test A\n' > "$WORK/dynamic.txt"
# The negative mix of the denial phase: each static question in turn, then one of 200 missing
# names (NXDOMAIN, or NOERROR with compact denial): half the answers carry a denial proof. The
# names repeat, so switchyard's signature cache holds their proofs after the first pass, as Knot
# holds its precomputed chain; a flood of never-seen names is another case, not measured here.
for i in $(seq 200); do sed -n "$(( (i - 1) % 8 + 1 ))p" "$WORK/static.txt"; echo "nx$i.bench.test A"; done >"$WORK/negative.txt"
ECS_G1="8:000118000a0100" # EDNS Client Subnet option, family 1, /24, 10.1.0.0

# answers PORT succeeds when the server on PORT answers www.bench.test A with its address.
answers() { dig +short +time=1 +tries=1 @127.0.0.1 -p "$1" www.bench.test A 2>/dev/null | grep -q 192.0.2.1; }
# signs PORT succeeds when the DO=1 answer for www.bench.test A carries an RRSIG.
signs() { dig +dnssec +norec +time=1 +tries=1 @127.0.0.1 -p "$1" www.bench.test A 2>/dev/null | grep -q 'RRSIG'; }
# nsec3 PORT succeeds when the DO=1 answer for a missing name is NXDOMAIN with an NSEC3 proof.
nsec3() {
  local out
  out=$(dig +dnssec +norec +time=1 +tries=1 @127.0.0.1 -p "$1" nx1.bench.test A 2>/dev/null) || return 1
  grep -q 'status: NXDOMAIN' <<<"$out" && grep -q 'NSEC3' <<<"$out"
}
# validates NAME TYPE has BIND's validator check switchyard's signed answer against the CSK.
validates() {
  local out
  out=$(delv @127.0.0.1 -p $PORT_SY -a "$WORK/anchor" +root=bench.test. "$1" "$2" 2>&1) || true
  grep -q 'fully validated' <<<"$out" || bench_fail "switchyard-signed: delv did not validate $1 $2: $out"
}

start() { # name -> starts the server in the background, waits (10 s) until it answers
  case $1 in
  switchyard-xdp) "$BIN" dns run --config "$WORK/switchyard-xdp.yaml" --metrics 127.0.0.1:$PORT_METRICS >"$WORK/sy-xdp.log" 2>&1 & port=$PORT_SY ;;
  switchyard | switchyard-unsigned) $SY_WRAP "$BIN" dns run --config "$WORK/switchyard.yaml" --metrics 127.0.0.1:$PORT_METRICS >"$WORK/sy.log" 2>&1 & port=$PORT_SY ;;
  nsd) nsd -d -c "$WORK/nsd.conf" >"$WORK/nsd.out" 2>&1 & port=$PORT_NSD ;;
  knot) knotd -c "$WORK/knot.conf" >"$WORK/knot.out" 2>&1 & port=$PORT_KNOT ;;
  switchyard-signed) "$BIN" dns run --config "$WORK/switchyard-signed.yaml" >"$WORK/sy-signed.log" 2>&1 & port=$PORT_SY ;;
  knot-signed) knotd -c "$WORK/knot-signed.conf" >"$WORK/knot-signed.out" 2>&1 & port=$PORT_KNOT ;;
  switchyard-nsec3) "$BIN" dns run --config "$WORK/switchyard-nsec3.yaml" >"$WORK/sy-nsec3.log" 2>&1 & port=$PORT_SY ;;
  knot-nsec3) knotd -c "$WORK/knot-nsec3.conf" >"$WORK/knot-nsec3.out" 2>&1 & port=$PORT_KNOT ;;
  switchyard-update) rm -f "$WORK"/bench.test.zone.updates "$WORK"/bench.test.ixfr
    "$BIN" dns run --config "$WORK/switchyard-update.yaml" >"$WORK/sy-update.log" 2>&1 & port=$PORT_SY ;;
  knot-secondary) rm -rf "$WORK/knot-secondary"/*; knotd -c "$WORK/knot-secondary.conf" >"$WORK/knot-secondary.out" 2>&1 & port=$PORT_KNOT ;;
  switchyard-stall) rm -rf "$WORK/stall-keys" "$WORK/stall.zone.updates"
    "$BIN" dns run --config "$WORK/switchyard-stall.yaml" --metrics 127.0.0.1:$PORT_METRICS >"$WORK/sy-stall.log" 2>&1 & port=$PORT_SY ;;
  knot-update) rm -rf "$WORK/knot-update"/{journal,timers,keys}; knotd -c "$WORK/knot-update.conf" >"$WORK/knot-update.out" 2>&1 & port=$PORT_KNOT ;;
  esac
  PID=$!
  PIDS+=("$PID")
  LOGS="$WORK/*.log $WORK/*.out" ready "$1" 10 answers "$port"
  # Knot lost a few queries of a load (200 outstanding) that started at its first answer (its first
  # second after start goes to zone events and workers); the rounds measure the server settled.
  sleep 1
  LOGS="$WORK/*.log $WORK/*.out" ready "$1" 5 answers "$port"
  case $1 in *-signed | *-stall) LOGS="$WORK/*.log $WORK/*.out" ready "$1" 10 signs "$port" ;; esac
  case $1 in *-nsec3) LOGS="$WORK/*.log $WORK/*.out" ready "$1" 10 signs "$port"
    LOGS="$WORK/*.log $WORK/*.out" ready "$1" 10 nsec3 "$port" ;; esac
}
SY_WRAP=""
stop() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
port_of() { case $1 in switchyard*) echo $PORT_SY ;; nsd) echo $PORT_NSD ;; knot*) echo $PORT_KNOT ;; esac; }

# rcvbuf_errors is the kernel's count of UDP datagrams dropped on a full receive buffer.
rcvbuf_errors() { awk '/^Udp:/ { getline; print $6; exit }' /proc/net/snmp; }

# cpu_ticks is the CPU time (user + system, clock ticks) of the server $PID and its descendants
# (NSD's server processes): CPU per answer does not depend on how much of the shared machine
# the server got, unlike q/s.
# NSD's first process becomes xfrd; its child is the main process, whose children serve: count
# every descendant.
descendants() { local c; for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done; }
cpu_ticks() {
  local t=0 p
  for p in $PID $(descendants "$PID"); do
    # Fields after the command name, which may hold spaces ("nsd: main"): utime, stime are 12, 13.
    t=$(( t + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{s = $12 + $13} END {print s + 0}') ))
  done
  echo $t
}

# perf WHAT NAME FILE RCODES [dnsperf args] -> checks the run, sets RESULT to
# "qps lost avg_latency_ms sent cpu_us_per_answer"
# batch_counters: switchyard's recvmmsg calls that returned datagrams, and the datagrams ("0 0"
# for a server without the metrics); their difference over a round gives the batch fill.
batch_counters() {
  curl -s --max-time 2 "http://127.0.0.1:$PORT_METRICS/metrics" 2>/dev/null | awk '
    /^switchyard_dns_udp_recv_batches_total / {b=$2} /^switchyard_dns_udp_recv_datagrams_total / {d=$2}
    END {printf "%d %d\n", b, d}'
}

perf() {
  local what=$1 name=$2 file=$3 rcodes=$4 out drops ticks b0 d0 b1 d1; shift 4
  drops=$(rcvbuf_errors)
  ticks=$(cpu_ticks)
  read -r b0 d0 <<<"$(batch_counters)"
  # bash's time gives dnsperf's own CPU: the XDP path answers in the softirq of the sender, so
  # its work per answer shows there, not in the server's.
  local TIMEFORMAT='DNSPERF_CPU %U %S'
  out=$( { time dnsperf -s 127.0.0.1 -p "$(port_of "$name")" -d "$file" -l "$SECONDS_PER_RUN" -c "$CLIENTS" \
    -q "$OUTSTANDING" -b "$CLIENT_BUFFER_KB" -T 1 -t 2 "$@" 2>&1; } 2>&1) || bench_fail "$what: dnsperf exited non-zero: $out"
  drops=$(( $(rcvbuf_errors) - drops ))
  ticks=$(( $(cpu_ticks) - ticks ))
  read -r b1 d1 <<<"$(batch_counters)"
  FILL=$(awk -v b=$((b1 - b0)) -v d=$((d1 - d0)) 'BEGIN{printf "%.2f", (b > 0 ? d / b : 0)}')
  check_dnsperf "$what (kernel UDP receive-buffer drops during the run: $drops)" "$out" "$rcodes"
  CLIENT_CPU=$(awk '/Queries completed:/ {done=$3} /^DNSPERF_CPU / {c=$2+$3} END {printf "%.2f", (done > 0 ? c * 1e6 / done : 0)}' <<<"$out")
  RESULT=$(awk -v ticks="$ticks" -v hz="$(getconf CLK_TCK)" '
      /Queries completed:/ {done=$3}
      /Queries sent:/ {sent=$3}
      /Queries lost:/ {lost=$3}
      /Queries per second:/ {qps=$4}
      /Average Latency/ {lat=$4*1000}
      END {printf "%s %s %.3f %s %.2f\n", qps, lost, lat, sent, (done > 0 ? ticks * 1e6 / hz / done : 0)}' <<<"$out")
}

declare -A QPS LOST LAT CPU FILLS
addfill() { FILLS[$1]=$(awk -v a="${FILLS[$1]:-0}" -v b="$2" 'BEGIN{print a+b}'); }
fillnote() { [ "$FILL" = 0.00 ] || echo ", batch fill $FILL datagrams per recvmmsg"; }
addcpu() { CPU[$1]=$(awk -v a="${CPU[$1]:-0}" -v b="$2" 'BEGIN{print a+b}'); }
add() { # key qps lost lat
  QPS[$1]=$(awk -v a="${QPS[$1]:-0}" -v b="$2" 'BEGIN{print a+b}')
  LOST[$1]=$(( ${LOST[$1]:-0} + $3 ))
  LAT[$1]=$(awk -v a="${LAT[$1]:-0}" -v b="$4" 'BEGIN{print a+b}')
}

avg() { awk -v a="$1" -v n="$ROUNDS" 'BEGIN{printf "%.0f", a/n}'; }
avgf() { awk -v a="$1" -v n="$ROUNDS" 'BEGIN{printf "%.3f", a/n}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b>0) printf "%.3f", a/b; else print 0 }'; }
echo "dns bench: $ROUNDS rounds x ${SECONDS_PER_RUN}s per server and phase, dnsperf -c $CLIENTS -q $OUTSTANDING -b $CLIENT_BUFFER_KB, $(nproc) cores"
for r in $(rounds_of static); do
  # Alternate the order every round so no server always runs on a warmer or busier machine.
  if (( r % 2 )); then order="switchyard switchyard-xdp nsd knot"; else order="knot nsd switchyard-xdp switchyard"; fi
  for s in $order; do
    start "$s"
    perf "round $r $s static" "$s" "$WORK/static.txt" "NOERROR NXDOMAIN" -e
    read -r q l t _ u <<<"$RESULT"
    add "$s/static" "$q" "$l" "$t"; addcpu "$s/static" "$u"; addfill "$s/static" "$FILL"; addcpu "client/$s" "$CLIENT_CPU"
    echo "  round $r $s static: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer (dnsperf's: $CLIENT_CPU us)$(fillnote)"
    perf "round $r $s dynamic+ECS" "$s" "$WORK/dynamic.txt" "NOERROR" -E "$ECS_G1"
    read -r q l t _ u <<<"$RESULT"
    add "$s/ecs" "$q" "$l" "$t"; addcpu "$s/ecs" "$u"
    if [ "$s" = switchyard ] || [ "$s" = switchyard-xdp ]; then
      echo "  round $r $s dynamic+ECS: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer"
    else
      echo "  round $r $s same names (static A) + ECS: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer"
    fi
    stop
  done
done

# DNSSEC: DO=1 queries (dnsperf -D) to switchyard signing online and to Knot's signed zone, with
# switchyard unsigned (DO=0) measured in the same rounds, so the signed/unsigned ratio compares
# neighbouring runs on this shared machine. The missing name is answered NOERROR by switchyard
# (compact denial) and NXDOMAIN by Knot (NSEC).
for r in $(rounds_of signed); do
  if (( r % 2 )); then order="switchyard-signed switchyard-unsigned knot-signed"; else order="knot-signed switchyard-unsigned switchyard-signed"; fi
  for s in $order; do
    start "$s"
    do=""
    if [ "$s" != switchyard-unsigned ]; then do=-D; fi
    if [ "$s" = switchyard-signed ] && [ "$r" = 1 ]; then
      validates www.bench.test A; validates app.bench.test A; validates missing.bench.test A
    fi
    perf "round $r $s static ${do:-DO=0}" "$s" "$WORK/static.txt" "NOERROR NXDOMAIN" ${do:-} -e
    read -r q l t _ u <<<"$RESULT"
    add "$s/static" "$q" "$l" "$t"; addcpu "$s/static" "$u"
    echo "  round $r $s static${do:+ DO=1}: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer"
    if [ "$s" != knot-signed ]; then
      perf "round $r $s dynamic+ECS" "$s" "$WORK/dynamic.txt" "NOERROR" ${do:-} -E "$ECS_G1"
      read -r q l t _ u <<<"$RESULT"
      add "$s/ecs" "$q" "$l" "$t"; addcpu "$s/ecs" "$u"
      echo "  round $r $s dynamic+ECS${do:+ DO=1}: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer"
    fi
    stop
  done
done

# Denial: DO=1 queries to switchyard signing with compact denial and with NSEC3, and to Knot
# signing the same zone with NSEC3, on the static questions and on the negative mix (half the
# answers a denial: where a proof costs). delv validates switchyard's NSEC3 answers first.
for r in $(rounds_of denial); do
  if (( r % 2 )); then order="switchyard-nsec3 switchyard-signed knot-nsec3"; else order="knot-nsec3 switchyard-signed switchyard-nsec3"; fi
  for s in $order; do
    start "$s"
    if [ "$s" = switchyard-nsec3 ] && [ "$r" = 1 ]; then
      validates www.bench.test A; validates nx1.bench.test A; validates www.bench.test TXT
    fi
    for set in static negative; do
      perf "round $r $s $set DO=1" "$s" "$WORK/$set.txt" "NOERROR NXDOMAIN" -D -e
      read -r q l t _ u <<<"$RESULT"
      add "denial/$s/$set" "$q" "$l" "$t"; addcpu "denial/$s/$set" "$u"
      echo "  round $r $s $set DO=1: ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer"
    done
    stop
  done
done

# Updates: bench/dnsupdate to switchyard with a Knot secondary following it, and to Knot as the
# primary, in alternating order; updates applied per second (acknowledged NOERROR), the primary's
# CPU per update, and how long after the last acknowledgement the secondary serves its serial.
# serial PORT prints the zone's SOA serial as the server on PORT answers it.
serial() { dig +short +time=1 +tries=1 @127.0.0.1 -p "$1" bench.test SOA 2>/dev/null | awk '{print $3}'; }
updates() { # what port -> sets RESULT "ups p99_ms cpu_us_per_update"
  local what=$1 port=$2 out ticks ok
  ticks=$(cpu_ticks)
  out=$("$WORK_BUILD/dnsupdate" -addr "127.0.0.1:$port" -secret "$UPD_SECRET" -key upd -c "$UPDATE_CONNS" -m 1 \
    -d "${SECONDS_PER_RUN}s" -n "$UPDATES" -timeout 5s 2>&1) || bench_fail "$what: dnsupdate failed: $out"
  ticks=$(( $(cpu_ticks) - ticks ))
  check_loadgen "$what" "$out"
  ok=$(kv ok "$out")
  RESULT="$(kv rps "$out") $(kv p99_ms "$out") $(us_per "$ticks" "$ok")"
}
for r in $(rounds_of update); do
  if (( r % 2 )); then order="switchyard-update knot-update"; else order="knot-update switchyard-update"; fi
  for s in $order; do
    if [ "$s" = switchyard-update ]; then
      start switchyard-update; SYPID=$PID
      start knot-secondary; KPID=$PID
      [ "$(serial $PORT_KNOT)" = "$(serial $PORT_SY)" ] || bench_fail "round $r: the Knot secondary does not serve switchyard's serial before the updates"
      PID=$SYPID
      updates "round $r switchyard updates" $PORT_SY
      read -r q p u <<<"$RESULT"
      t0=$(date +%s%N); want=$(serial $PORT_SY); deadline=$((SECONDS + 30))
      until [ "$(serial $PORT_KNOT)" = "$want" ]; do
        [ "$SECONDS" -lt "$deadline" ] || bench_fail "round $r: the Knot secondary did not serve serial $want within 30 s of the last update (it serves $(serial $PORT_KNOT))"
        sleep 0.01
      done
      lag=$(( ($(date +%s%N) - t0) / 1000000 ))
      add update/switchyard "$q" 0 "$p"; addcpu update/switchyard "$u"; addcpu update/lag "$lag"
      echo "  round $r switchyard: $q updates/s applied, p99 $p ms, $u us CPU per update; Knot secondary serves serial $want $lag ms after the last"
      PID=$KPID; stop; PID=$SYPID; stop
    else
      start knot-update
      updates "round $r knot updates" $PORT_KNOT
      read -r q p u <<<"$RESULT"
      add update/knot "$q" 0 "$p"; addcpu update/knot "$u"
      echo "  round $r knot primary: $q updates/s applied, p99 $p ms, $u us CPU per update"
      stop
    fi
  done
done
UPDATE_JSON=""
if [ -n "$(rounds_of update)" ]; then
uq=$(avg "${QPS[update/switchyard]}"); ukq=$(avg "${QPS[update/knot]}")
echo "updates/s: switchyard $uq (p99 $(avgf "${LAT[update/switchyard]}") ms, $(avgf "${CPU[update/switchyard]}") us CPU), knot primary $ukq (p99 $(avgf "${LAT[update/knot]}") ms, $(avgf "${CPU[update/knot]}") us CPU); switchyard / knot $(ratio "$uq" "$ukq"); Knot secondary serves the last $(avg "${CPU[update/lag]}") ms after it"
UPDATE_JSON="\"update_qps\": $uq, \"update_p99_ms\": $(avgf "${LAT[update/switchyard]}"), \"update_cpu_us\": $(avgf "${CPU[update/switchyard]}"), \"update_secondary_lag_ms\": $(avg "${CPU[update/lag]}"), \"knot_update_qps\": $ukq, \"knot_update_p99_ms\": $(avgf "${LAT[update/knot]}"), \"knot_update_cpu_us\": $(avgf "${CPU[update/knot]}"), \"update_ratio_vs_knot\": $(ratio "$uq" "$ukq"), "
fi

# Core scaling: switchyard on one core (taskset -c 0, GOMAXPROCS=1) against both cores, static
# names, same load, the order alternating by round. dnsperf shares the two cores with the server
# (on one core the server leaves dnsperf a core of its own), so q/s understates scaling; the CPU
# per answer on one core and on two is the figure that does not depend on that share.
for r in $(rounds_of cores); do
  if (( r % 2 )); then corder="1 2"; else corder="2 1"; fi
  for c in $corder; do
    if [ "$c" = 1 ]; then SY_WRAP="taskset -c 0 env GOMAXPROCS=1"; else SY_WRAP="taskset -c 0,1"; fi
    start switchyard
    perf "round $r switchyard static on $c core(s)" switchyard "$WORK/static.txt" "NOERROR NXDOMAIN" -e
    read -r q l t _ u <<<"$RESULT"
    add "cores$c" "$q" "$l" "$t"; addcpu "cores$c" "$u"
    echo "  round $r switchyard static on $c core(s): ${q} q/s, lost $l, ${t} ms, ${u} us CPU per answer$(fillnote)"
    stop
  done
done
SY_WRAP=""

# Stall: DO=1 queries at STALL_RATE a second (bench/dnsquery: a query's latency counts from its
# release, so answers that wait show with their backlog) to the stall server. Per round: a quiet
# window, a window with a burst of STALL_UPDATES updates (bench/dnsupdate, one at a time, to other
# names of the same zone), a quiet window, then a window over a whole ZSK rollover (generation,
# publication, the new key signing, the old one removed: four rebuilds of the signers). The
# quiet windows must see one ZSK's signatures and the rollover window two, or the run fails.
STALL_Q="www.bench.test A, www.bench.test AAAA, api.bench.test A, cdn.bench.test A, bench.test MX, bench.test TXT"
# next_transition prints the Unix second of the stall zone's next key transition (`dns keys`).
next_transition() {
  local t
  t=$("$BIN" dns keys --config "$WORK/switchyard-stall.yaml" 2>&1 | awk '/next transition/ {print $3}')
  [ -n "$t" ] || bench_fail "stall: dns keys shows no next transition: $("$BIN" dns keys --config "$WORK/switchyard-stall.yaml" 2>&1)"
  date -d "$t" +%s
}
# signatures prints the RRSIGs the stall server made so far (signature cache misses).
signatures() { curl -s --max-time 2 "http://127.0.0.1:$PORT_METRICS/metrics" | awk '/^switchyard_dns_dnssec_signatures_total / {print $2 + 0}'; }
# median prints the middle one of its arguments (the lower middle of an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
stall_run() { # seconds -> starts bench/dnsquery in the background (QPID), notes the signatures made
  SIGS0=$(signatures)
  "$WORK_BUILD/dnsquery" -addr "127.0.0.1:$PORT_SY" -q "$STALL_Q" -dnssec -rate "$STALL_RATE" -c "$STALL_CONNS" -m 1 \
    -d "${1}s" -n 10000000 -timeout 2s >"$WORK/stallq.out" 2>&1 &
  QPID=$!
}
stall_result() { # what -> waits for bench/dnsquery, checks its run, sets RESULT "p50_ms p99_ms keytags rps signatures"
  local out
  wait "$QPID" || true
  out=$(cat "$WORK/stallq.out")
  check_loadgen "$1" "$out"
  RESULT="$(kv p50_ms "$out") $(kv p99_ms "$out") $(kv keytags "$out") $(kv rps "$out") $(( $(signatures) - SIGS0 ))"
}
STALL_JSON=""
if [ -n "$(rounds_of stall)" ]; then
  start switchyard-stall
  # The first keys count as active since a minute before they were made, so with a lifetime
  # under that their successor is due at once: a reload (SIGHUP) has the policy schedule it.
  kill -HUP "$PID"
  zsks() { [ "$("$BIN" dns keys --config "$WORK/switchyard-stall.yaml" | grep -c '^  zsk ')" -ge 2 ]; }
  LOGS="$WORK/sy-stall.log" ready "switchyard-stall's first ZSK rollover" 10 zsks
  # A rollover's transitions: generation, publication Dprp (1 s) later, the new ZSK signing Ipub
  # (2 s) after that, the old one removed Iret (2 s) later, each seen by the key loop within 1 s.
  roll_span=7
  RU=() RR=() # each round's ratios, during / before
  need=$(( 3 * STALL_SECONDS + 8 )) # the three windows before the generation, with their starts
  for r in $(rounds_of stall); do
    deadline=$((SECONDS + 2 * STALL_ZSK_LIFETIME + 30))
    until t=$(next_transition); [ $((t - $(date +%s))) -ge $need ]; do # a gap with no transition
      [ "$SECONDS" -lt "$deadline" ] || bench_fail "round $r stall: no gap of ${need}s between key transitions (raise STALL_ZSK_LIFETIME)"
      sleep $(( t + roll_span + 1 - $(date +%s) > 0 ? t + roll_span + 1 - $(date +%s) : 1 ))
    done
    stall_run "$STALL_SECONDS"; stall_result "round $r stall quiet"
    read -r p50 qu tags rps sq <<<"$RESULT"
    [[ $tags != *,* ]] || bench_fail "round $r stall: the quiet window saw two ZSKs ($tags): a key transition fell in it"
    stall_run "$STALL_SECONDS"; sleep 1
    out=$("$WORK_BUILD/dnsupdate" -addr "127.0.0.1:$PORT_SY" -secret "$UPD_SECRET" -key upd -ttl 1 -c 1 -m 1 \
      -d "$(( STALL_SECONDS > 3 ? STALL_SECONDS - 2 : 1 ))s" -n "$STALL_UPDATES" -timeout 5s 2>&1) || bench_fail "round $r stall: dnsupdate failed: $out"
    check_loadgen "round $r stall updates" "$out"
    ups=$(kv rps "$out"); nup=$(kv ok "$out")
    stall_result "round $r stall during updates"
    read -r _ du _ _ su <<<"$RESULT"
    stall_run "$STALL_SECONDS"; stall_result "round $r stall quiet before the rollover"
    read -r _ qr tags _ <<<"$RESULT"
    [[ $tags != *,* ]] || bench_fail "round $r stall: the quiet window saw two ZSKs ($tags): a key transition fell in it"
    t=$(next_transition); wait_s=$((t - 1 - $(date +%s)))
    [ "$wait_s" -ge 0 ] || bench_fail "round $r stall: the rollover started before its window (at $t)"
    sleep "$wait_s"
    stall_run $((roll_span + 1)); stall_result "round $r stall during the ZSK rollover"
    read -r _ dr tags _ sr <<<"$RESULT"
    [[ $tags == *,* ]] || bench_fail "round $r stall: the rollover window (from $((t - 1))) saw one ZSK ($tags): no new key signed in it; keys: $("$BIN" dns keys --config "$WORK/switchyard-stall.yaml" 2>&1); log: $(grep -v 'dns update applied' "$WORK/sy-stall.log" | tail -5)"
    addcpu stall/p50 "$p50"; addcpu stall/rps "$rps"; addcpu stall/ups "$ups"
    addcpu stall/quiet_u "$qu"; addcpu stall/update "$du"; addcpu stall/quiet_r "$qr"; addcpu stall/rollover "$dr"
    RU+=("$(ratio "$du" "$qu")"); RR+=("$(ratio "$dr" "$qr")")
    echo "  round $r stall: $rps q/s DO=1, p50 $p50 ms; p99 quiet $qu ms ($sq signatures made), during $nup updates ($ups a second) $du ms (${RU[-1]}x, $su signatures); p99 quiet $qr ms, during the ZSK rollover $dr ms (${RR[-1]}x, $sr signatures; ZSK tags $tags)"
  done
  stop
  squ=$(avgf "${CPU[stall/quiet_u]}"); sdu=$(avgf "${CPU[stall/update]}"); sqr=$(avgf "${CPU[stall/quiet_r]}"); sdr=$(avgf "${CPU[stall/rollover]}")
  # The ratios are the median round's: one round whose quiet window met a burst of the shared
  # machine's other work would sway a ratio of averages.
  sru=$(median "${RU[@]}"); srr=$(median "${RR[@]}")
  echo "stall (DO=1 at $STALL_RATE q/s, p99, averages): quiet $squ ms, during updates $sdu ms; quiet $sqr ms, during a ZSK rollover $sdr ms; median round's during / before: updates ${sru}x (rounds: ${RU[*]}), rollover ${srr}x (rounds: ${RR[*]}); target <= 1.2x"
  STALL_JSON="\"stall_rate\": $STALL_RATE, \"stall_qps\": $(avgf "${CPU[stall/rps]}"), \"stall_p50_ms\": $(avgf "${CPU[stall/p50]}"), \"stall_before_update_p99_ms\": $squ, \"stall_update_p99_ms\": $sdu, \"stall_update_p99_ratio\": $sru, \"stall_updates_per_s\": $(avgf "${CPU[stall/ups]}"), \"stall_before_rollover_p99_ms\": $sqr, \"stall_rollover_p99_ms\": $sdr, \"stall_rollover_p99_ratio\": $srr, "
fi

if [ "$PHASES" != "$ALL_PHASES" ]; then
  write_json bench/out/dns-partial.json <<JSON
{${STALL_JSON}${UPDATE_JSON}"phases": "$PHASES", "rounds": $ROUNDS, "seconds_per_run": $SECONDS_PER_RUN, "smoke": $(smoke_json)}
JSON
  exit 0
fi

declare -A CPUAVG

sy=$(avg "${QPS[switchyard/static]}"); nsd=$(avg "${QPS[nsd/static]}"); knot=$(avg "${QPS[knot/static]}")
sye=$(avg "${QPS[switchyard/ecs]}"); nsde=$(avg "${QPS[nsd/ecs]}"); knote=$(avg "${QPS[knot/ecs]}")
for k in switchyard/static nsd/static knot/static switchyard/ecs nsd/ecs knot/ecs; do CPUAVG[$k]=$(avgf "${CPU[$k]}"); done
echo
printf '%-12s | %12s | %8s | %10s | %14s | %8s | %10s\n' server "static q/s" lost "latency ms" "dyn+ECS q/s" lost "latency ms"
printf -- '-------------|--------------|----------|------------|----------------|----------|-----------\n'
for s in switchyard switchyard-xdp nsd knot; do
  printf '%-12s | %12s | %8s | %10s | %14s | %8s | %10s\n' "$s" "$(avg "${QPS[$s/static]}")" "${LOST[$s/static]}" \
    "$(avgf "${LAT[$s/static]}")" "$(avg "${QPS[$s/ecs]}")" "${LOST[$s/ecs]}" "$(avgf "${LAT[$s/ecs]}")"
done
echo
echo "switchyard / nsd (static): $(ratio "$sy" "$nsd")   switchyard / knot (static): $(ratio "$sy" "$knot")"
syx=$(avg "${QPS[switchyard-xdp/static]}"); syxl=$(avgf "${LAT[switchyard-xdp/static]}"); nsdl=$(avgf "${LAT[nsd/static]}")
echo "switchyard with XDP / nsd (static): $(ratio "$syx" "$nsd")   / knot: $(ratio "$syx" "$knot")   / switchyard without: $(ratio "$syx" "$sy")   latency / nsd's: $(ratio "$syxl" "$nsdl")"
echo "(XDP answers run in the softirq of the sender, dnsperf's, so the server's CPU per answer leaves them out.)"
for k in switchyard switchyard-xdp nsd knot; do CPUAVG[client/$k]=$(avgf "${CPU[client/$k]}"); done
echo "CPU per static answer, dnsperf's + the server's (us): switchyard $(awk -v a="${CPUAVG[client/switchyard]}" -v b="$(avgf "${CPU[switchyard/static]}")" 'BEGIN{print a+b}'), switchyard-xdp $(awk -v a="${CPUAVG[client/switchyard-xdp]}" -v b="$(avgf "${CPU[switchyard-xdp/static]}")" 'BEGIN{print a+b}'), nsd $(awk -v a="${CPUAVG[client/nsd]}" -v b="$(avgf "${CPU[nsd/static]}")" 'BEGIN{print a+b}'), knot $(awk -v a="${CPUAVG[client/knot]}" -v b="$(avgf "${CPU[knot/static]}")" 'BEGIN{print a+b}')"
echo "switchyard dynamic+ECS / switchyard static: $(ratio "$sye" "$sy")   switchyard dynamic+ECS / nsd static+ECS: $(ratio "$sye" "$nsde")   / nsd static: $(ratio "$sye" "$nsd")"
echo "(NSD and Knot answer the dynamic names as plain static records and ignore the ECS option.)"
echo "CPU per answer (us, user+system of the server's processes): static switchyard ${CPUAVG[switchyard/static]}, nsd ${CPUAVG[nsd/static]}, knot ${CPUAVG[knot/static]}; dynamic+ECS switchyard ${CPUAVG[switchyard/ecs]}, nsd ${CPUAVG[nsd/ecs]}, knot ${CPUAVG[knot/ecs]}"
echo "NSD CPU per static answer / switchyard's: $(ratio "${CPUAVG[nsd/static]}" "${CPUAVG[switchyard/static]}")   Knot's / switchyard's: $(ratio "${CPUAVG[knot/static]}" "${CPUAVG[switchyard/static]}")   NSD static / switchyard dynamic+ECS: $(ratio "${CPUAVG[nsd/static]}" "${CPUAVG[switchyard/ecs]}")"
sg=$(avg "${QPS[switchyard-signed/static]}"); sge=$(avg "${QPS[switchyard-signed/ecs]}"); ks=$(avg "${QPS[knot-signed/static]}")
su=$(avg "${QPS[switchyard-unsigned/static]}"); sue=$(avg "${QPS[switchyard-unsigned/ecs]}")
echo "signed (DO=1): switchyard static $sg q/s (lost ${LOST[switchyard-signed/static]}, $(avgf "${LAT[switchyard-signed/static]}") ms), dynamic+ECS $sge q/s (lost ${LOST[switchyard-signed/ecs]}); knot signed static $ks q/s (lost ${LOST[knot-signed/static]})"
echo "switchyard unsigned in the same rounds: static $su q/s, dynamic+ECS $sue q/s"
echo "switchyard signed / unsigned: static $(ratio "$sg" "$su"), dynamic+ECS $(ratio "$sge" "$sue");   switchyard signed / knot signed (static): $(ratio "$sg" "$ks")"
sgc=$(avgf "${CPU[switchyard-signed/static]}"); suc=$(avgf "${CPU[switchyard-unsigned/static]}"); ksc=$(avgf "${CPU[knot-signed/static]}")
echo "CPU per answer (us), static: switchyard signed $sgc, unsigned $suc (signed / unsigned $(ratio "$sgc" "$suc")), knot signed $ksc"
echo "switchyard batch fill (datagrams per recvmmsg that returned any), static: $(avgf "${FILLS[switchyard/static]}")"
c1=$(avg "${QPS[cores1]}"); c2=$(avg "${QPS[cores2]}")
echo "switchyard static: 1 core $c1 q/s (lost ${LOST[cores1]}), 2 cores $c2 q/s (lost ${LOST[cores2]}), 2 / 1: $(ratio "$c2" "$c1")"
cc1=$(avgf "${CPU[cores1]}"); cc2=$(avgf "${CPU[cores2]}")
echo "switchyard CPU per static answer: 1 core $cc1 us, 2 cores $cc2 us (1 / 2: $(ratio "$cc1" "$cc2"))"

declare -A DQ DC
for s in switchyard-signed switchyard-nsec3 knot-nsec3; do
  for set in static negative; do DQ[$s/$set]=$(avg "${QPS[denial/$s/$set]}"); DC[$s/$set]=$(avgf "${CPU[denial/$s/$set]}"); done
done
echo "denial (DO=1), q/s and CPU per answer, static / negative mix:"
for s in switchyard-signed switchyard-nsec3 knot-nsec3; do
  echo "  $s: ${DQ[$s/static]} / ${DQ[$s/negative]} q/s (lost ${LOST[denial/$s/static]} / ${LOST[denial/$s/negative]}), ${DC[$s/static]} / ${DC[$s/negative]} us"
done
echo "switchyard / knot NSEC3 q/s: nsec3 $(ratio "${DQ[switchyard-nsec3/static]}" "${DQ[knot-nsec3/static]}") / $(ratio "${DQ[switchyard-nsec3/negative]}" "${DQ[knot-nsec3/negative]}"), compact $(ratio "${DQ[switchyard-signed/static]}" "${DQ[knot-nsec3/static]}") / $(ratio "${DQ[switchyard-signed/negative]}" "${DQ[knot-nsec3/negative]}")"
echo "knot NSEC3 CPU per answer / switchyard's: nsec3 $(ratio "${DC[knot-nsec3/static]}" "${DC[switchyard-nsec3/static]}") / $(ratio "${DC[knot-nsec3/negative]}" "${DC[switchyard-nsec3/negative]}"), compact $(ratio "${DC[knot-nsec3/static]}" "${DC[switchyard-signed/static]}") / $(ratio "${DC[knot-nsec3/negative]}" "${DC[switchyard-signed/negative]}")"
DENIAL_JSON=""
for s in switchyard-signed switchyard-nsec3 knot-nsec3; do
  case $s in switchyard-signed) k=compact ;; switchyard-nsec3) k=nsec3 ;; knot-nsec3) k=knot_nsec3 ;; esac
  DENIAL_JSON+="\"${k}_qps\": ${DQ[$s/static]}, \"${k}_neg_qps\": ${DQ[$s/negative]}, \"${k}_cpu_us\": ${DC[$s/static]}, \"${k}_neg_cpu_us\": ${DC[$s/negative]}, \"${k}_lost\": $(( ${LOST[denial/$s/static]} + ${LOST[denial/$s/negative]} )), "
done
for k in nsec3 compact; do
  case $k in nsec3) s=switchyard-nsec3 ;; compact) s=switchyard-signed ;; esac
  DENIAL_JSON+="\"${k}_ratio_vs_knot_nsec3\": $(ratio "${DQ[$s/static]}" "${DQ[knot-nsec3/static]}"), \"${k}_neg_ratio_vs_knot_nsec3\": $(ratio "${DQ[$s/negative]}" "${DQ[knot-nsec3/negative]}"), \"${k}_cpu_ratio_knot_nsec3_vs\": $(ratio "${DC[knot-nsec3/static]}" "${DC[$s/static]}"), \"${k}_neg_cpu_ratio_knot_nsec3_vs\": $(ratio "${DC[knot-nsec3/negative]}" "${DC[$s/negative]}"), "
done

write_json "$OUT" <<JSON
{"switchyard_qps": $sy, "nsd_qps": $nsd, "knot_qps": $knot, "switchyard_lost": ${LOST[switchyard/static]}, "nsd_lost": ${LOST[nsd/static]}, "knot_lost": ${LOST[knot/static]}, "switchyard_latency_ms": $(avgf "${LAT[switchyard/static]}"), "nsd_latency_ms": $(avgf "${LAT[nsd/static]}"), "knot_latency_ms": $(avgf "${LAT[knot/static]}"), "ratio_vs_nsd": $(ratio "$sy" "$nsd"), "ratio_vs_knot": $(ratio "$sy" "$knot"), "switchyard_xdp_qps": $syx, "switchyard_xdp_lost": ${LOST[switchyard-xdp/static]}, "switchyard_xdp_latency_ms": $syxl, "xdp_ratio_vs_nsd": $(ratio "$syx" "$nsd"), "xdp_ratio_vs_knot": $(ratio "$syx" "$knot"), "xdp_ratio_vs_switchyard": $(ratio "$syx" "$sy"), "xdp_latency_ratio_vs_nsd": $(ratio "$syxl" "$nsdl"), "switchyard_xdp_cpu_us": $(avgf "${CPU[switchyard-xdp/static]}"), "switchyard_xdp_client_cpu_us": ${CPUAVG[client/switchyard-xdp]}, "switchyard_client_cpu_us": ${CPUAVG[client/switchyard]}, "nsd_client_cpu_us": ${CPUAVG[client/nsd]}, "switchyard_ecs_qps": $sye, "nsd_ecs_qps": $nsde, "knot_ecs_qps": $knote, "switchyard_ecs_lost": ${LOST[switchyard/ecs]}, "ecs_ratio_vs_static": $(ratio "$sye" "$sy"), "ecs_ratio_vs_nsd": $(ratio "$sye" "$nsde"), "ecs_ratio_vs_nsd_static": $(ratio "$sye" "$nsd"), "switchyard_1core_qps": $c1, "switchyard_2core_qps": $c2, "cores_2_vs_1": $(ratio "$c2" "$c1"), "switchyard_1core_cpu_us": $cc1, "switchyard_2core_cpu_us": $cc2, "switchyard_cpu_us": ${CPUAVG[switchyard/static]}, "switchyard_batch_fill": $(avgf "${FILLS[switchyard/static]}"), "nsd_cpu_us": ${CPUAVG[nsd/static]}, "knot_cpu_us": ${CPUAVG[knot/static]}, "switchyard_ecs_cpu_us": ${CPUAVG[switchyard/ecs]}, "cpu_ratio_nsd_vs_switchyard": $(ratio "${CPUAVG[nsd/static]}" "${CPUAVG[switchyard/static]}"), "cpu_ratio_knot_vs_switchyard": $(ratio "${CPUAVG[knot/static]}" "${CPUAVG[switchyard/static]}"), "switchyard_cores_lost": $(( ${LOST[cores1]} + ${LOST[cores2]} )), "signed_qps": $sg, "signed_lost": ${LOST[switchyard-signed/static]}, "signed_latency_ms": $(avgf "${LAT[switchyard-signed/static]}"), "unsigned_qps": $su, "signed_ratio_vs_unsigned": $(ratio "$sg" "$su"), "signed_ecs_qps": $sge, "signed_ecs_lost": ${LOST[switchyard-signed/ecs]}, "unsigned_ecs_qps": $sue, "signed_ecs_ratio_vs_unsigned": $(ratio "$sge" "$sue"), "knot_signed_qps": $ks, "knot_signed_lost": ${LOST[knot-signed/static]}, "signed_ratio_vs_knot_signed": $(ratio "$sg" "$ks"), "signed_cpu_us": $sgc, "unsigned_cpu_us": $suc, "signed_cpu_ratio_vs_unsigned": $(ratio "$sgc" "$suc"), "knot_signed_cpu_us": $ksc, ${DENIAL_JSON}${UPDATE_JSON}${STALL_JSON}"rounds": $ROUNDS, "seconds_per_run": $SECONDS_PER_RUN, "smoke": $(smoke_json)}
JSON
