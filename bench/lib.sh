# Shared by the bench scripts (sourced, not run). Each script sets BENCH (its stop's name) first.
#
# The rules every bench follows, so that no figure it prints or writes comes from a broken run:
#   - every host port the run will bind is free before it starts (ports_free names the holder);
#   - every peer answers before the rounds start (ready, http_ready: a probe with a deadline);
#   - every round is checked (check_wrk, check_h2load, check_dnsperf, check_loadgen; the body
#     sizes with check_wrk_body, check_h2load_body): one non-2xx answer, non-OK gRPC status,
#     socket error, timeout, lost query, unexpected RCODE or wrong object fails the whole run;
#   - the JSON is written (write_json: temp file + rename) only after every round passed, so a
#     failed run writes nothing and leaves no half-written file.
# BENCH_SMOKE=1 is the short mode: one round of about a second per cell, the same checks, and
# "smoke": true in the JSON (smoke_json).

BENCH=${BENCH:-bench}
BENCH_SMOKE=${BENCH_SMOKE:-0}

# is_smoke is true in the short mode (BENCH_SMOKE=1).
is_smoke() { [ "$BENCH_SMOKE" = 1 ]; }

# smoke_json prints the JSON value of the "smoke" key.
smoke_json() { if is_smoke; then echo true; else echo false; fi; }

# bench_fail stops the run with a message naming the stop and why; nothing is written after it.
bench_fail() {
	echo "$BENCH bench: FAILED: $*" >&2
	echo "$BENCH bench: no JSON written" >&2
	exit 1
}

# ensure_packages installs the Debian packages that are missing, quietly; a no-op when all are there.
# It waits up to 5 minutes for another apt or dpkg run to release its lock.
ensure_packages() {
	local need="" p
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
	if [ -n "$need" ]; then
		echo "installing:$need" >&2
		apt-get -o DPkg::Lock::Timeout=300 update -qq
		# shellcheck disable=SC2086
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $need >/dev/null
	fi
}

# require_binary stops with the command that builds the switchyard binary when it is missing.
require_binary() {
	[ -x "$1" ] || { echo "$2 bench: $1 missing; run: go build -o bin/switchyard ./cmd/switchyard" >&2; exit 1; }
}

# port_holder PORT prints the listening TCP or UDP sockets on PORT (any address) with the process
# that holds each, from ss; nothing when the port is free.
port_holder() {
	ss -ltnupH 2>/dev/null | awk -v p=":$1" '{ a = $5; if (substr(a, length(a) - length(p) + 1) == p) print }'
}

# ports_free PORT... fails the run, naming the process, when another process listens on one of
# the ports (TCP or UDP): a peer that cannot bind would leave its port to whoever holds it, and
# that process's answers would be measured instead.
ports_free() {
	local port line who
	command -v ss >/dev/null || ensure_packages iproute2
	for port in "$@"; do
		line=$(port_holder "$port" | head -1)
		[ -z "$line" ] && continue
		who=$(grep -o 'users:((.*))' <<<"$line" | sed -E 's/users:\(\("([^"]*)",pid=([0-9]+).*/\1 (pid \2)/')
		bench_fail "port $port is taken by ${who:-an unknown process} ($(awk '{print $1, $5}' <<<"$line")); stop it and run again"
	done
}

# ready NAME SECONDS CMD... runs CMD until it succeeds, for at most SECONDS; fails the run naming
# the peer that did not start. LOGS (a glob, optional) is printed on failure.
ready() {
	local name=$1 secs=$2 deadline said
	shift 2
	deadline=$((SECONDS + secs))
	until said=$("$@" 2>&1); do
		if [ "$SECONDS" -ge "$deadline" ]; then
			[ -n "${LOGS:-}" ] && { echo "--- logs" >&2; cat $LOGS >&2 2>/dev/null || true; }
			bench_fail "$name did not start: no good answer within ${secs}s ($*${said:+: $said})"
		fi
		sleep 0.1
	done
}

# http_200 URL succeeds when URL answers exactly 200 (TLS certificates not verified).
http_200() {
	local code
	code=$(curl -sk -o /dev/null -w '%{http_code}' --max-time 2 "$1") || true
	[ "$code" = 200 ] || { echo "answered ${code:-nothing}"; return 1; }
}

# http_ready NAME URL waits (10 s) until URL answers 200.
http_ready() { ready "$1" 10 http_200 "$2"; }

# check_wrk WHAT OUTPUT fails the run when wrk's OUTPUT shows a non-2xx/3xx answer, a socket error
# (connect, read, write, timeout) or no request at all. wrk counts statuses of 400 and above as
# "Non-2xx or 3xx"; the readiness probe before the rounds checks for exactly 200.
check_wrk() {
	local what=$1 out=$2 v
	v=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
	[ -z "$v" ] || bench_fail "$what: $v non-2xx/3xx responses"
	v=$(awk '/Socket errors:/ {sub(/.*Socket errors: /, ""); print}' <<<"$out")
	[ -z "$v" ] || bench_fail "$what: socket errors: $v"
	v=$(awk '/ requests in / {print $1}' <<<"$out")
	[ "${v:-0}" -gt 0 ] 2>/dev/null || bench_fail "$what: wrk made no request: $out"
}

# check_h2load WHAT OUTPUT [PROTO] fails the run when h2load's OUTPUT shows a failed, errored or
# timed-out request, a status other than 2xx, no successful request, or (PROTO given) another
# application protocol than PROTO (h2load falls back to HTTP/1.1 when ALPN gives no h2).
check_h2load() {
	local what=$1 out=$2 proto=${3:-} line
	line=$(grep '^requests:' <<<"$out") || bench_fail "$what: h2load gave no result: $out"
	read -r ok failed errored timeout < <(awk '{for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^succeeded/) s=$i; if ($(i+1) ~ /^failed/) f=$i; if ($(i+1) ~ /^errored/) e=$i; if ($(i+1) ~ /^timeout/) t=$i } print s+0, f+0, e+0, t+0}' <<<"$line")
	[ "$failed" = 0 ] && [ "$errored" = 0 ] && [ "$timeout" = 0 ] || bench_fail "$what: $line"
	[ "$ok" -gt 0 ] || bench_fail "$what: no request succeeded: $line"
	line=$(grep '^status codes:' <<<"$out")
	awk '{ if ($5 + $7 + $9 != 0) exit 1 }' <<<"$line" || bench_fail "$what: non-2xx answers: $line"
	if [ -n "$proto" ]; then
		grep -q "^Application protocol: $proto\$" <<<"$out" || bench_fail "$what: application protocol is not $proto: $(grep '^Application protocol' <<<"$out")"
	fi
}

# check_h2load_body WHAT OUTPUT LEN INFLIGHT fails the run unless h2load's body bytes (the DATA
# payload of its "traffic:" line) fit LEN bytes for each succeeded request: at least succeeded x
# LEN, at most (succeeded + INFLIGHT) x LEN (the requests still in flight when the run stopped,
# clients x streams, may have read part of their body). A short, long or wrong object fails it.
check_h2load_body() {
	local what=$1 out=$2 len=$3 inflight=$4 ok data
	ok=$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^succeeded/) print $i }' <<<"$out")
	data=$(awk '/^traffic:/ { n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^\([0-9]+\)$/) { n++; v = $i; gsub(/[()]/, "", v); if (n == 3) print v } }' <<<"$out")
	[ -n "$ok" ] && [ -n "$data" ] || bench_fail "$what: h2load gave no traffic figures: $(grep -E '^(requests|traffic):' <<<"$out")"
	awk -v d="$data" -v n="$ok" -v l="$len" -v f="$inflight" 'BEGIN { exit !(d >= n * l && d <= (n + f) * l) }' ||
		bench_fail "$what: $data body bytes for $ok requests: not $len bytes each (the object is not the one asked for)"
}

# check_wrk_body WHAT OUTPUT LEN CONNS fails the run unless the bytes wrk read fit LEN-byte bodies
# plus at most 1 KiB of status line and fields per request: at least requests x LEN, at most
# (requests + CONNS) x (LEN + 1024) (a request in flight on each connection at the end may have
# been read in part). The figures come from bench/wrk-bytes.lua's done(), a line "wrk-bytes
# BYTES REQUESTS"; wrk reads no body itself, and checking each in Lua would slow it down.
check_wrk_body() {
	local what=$1 out=$2 len=$3 conns=$4 line
	line=$(grep '^wrk-bytes ' <<<"$out") || bench_fail "$what: no wrk-bytes line (run wrk with -s bench/wrk-bytes.lua)"
	awk -v l="$len" -v c="$conns" '{ exit !($3 > 0 && $2 >= $3 * l && $2 <= ($3 + c) * (l + 1024)) }' <<<"$line" ||
		bench_fail "$what: wrk read $(awk '{print $2}' <<<"$line") bytes in $(awk '{print $3}' <<<"$line") answers: not $len-byte bodies"
}

# check_loadgen WHAT OUTPUT fails the run unless the key=value line of a Go load generator
# (bench/h3load, bench/grpcload: bench/loadstat) shows at least one good request and no bad
# answer, error or timeout. The generators exit 1 on those too; this is the second look.
check_loadgen() {
	local what=$1 out=$2 line k v said
	line=$(grep -E '^requests=[0-9]+ ok=' <<<"$out" | tail -1) || bench_fail "$what: the load generator gave no result: $out"
	said=$(grep -v '^requests=' <<<"$out" | head -3 | tr '\n' ' ' || true)
	for k in bad errors timeouts; do
		v=$(grep -o " $k=[0-9]*" <<<"$line" | cut -d= -f2)
		[ "${v:-x}" = 0 ] || bench_fail "$what: $k=${v:-missing}: $line${said:+ ($said)}"
	done
	v=$(grep -o ' ok=[0-9]*' <<<"$line" | cut -d= -f2)
	[ "${v:-0}" -gt 0 ] || bench_fail "$what: no request succeeded: $line"
}

# kv KEY LINE prints the value of KEY in a line of key=value pairs.
kv() { grep -o "\(^\| \)$1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2-; }

# check_dnsperf WHAT OUTPUT RCODES fails the run when dnsperf's OUTPUT shows a lost query, no
# completed query, or a response code outside RCODES (e.g. "NOERROR NXDOMAIN").
check_dnsperf() {
	local what=$1 out=$2 allowed=" $3 " v code
	v=$(awk '/Queries lost:/ {print $3}' <<<"$out")
	[ -n "$v" ] || bench_fail "$what: dnsperf gave no result: $out"
	[ "$v" = 0 ] || bench_fail "$what: $v queries lost (timed out): $(grep 'Queries lost' <<<"$out")"
	v=$(awk '/Queries completed:/ {print $3}' <<<"$out")
	[ "${v:-0}" -gt 0 ] || bench_fail "$what: no query completed"
	for code in $(grep 'Response codes:' <<<"$out" | sed 's/.*Response codes://' | tr ',' '\n' | awk '{print $1}'); do
		[[ "$allowed" == *" $code "* ]] || bench_fail "$what: unexpected response code $code: $(grep 'Response codes' <<<"$out")"
	done
}

# proc_tree PID... prints the PIDs and every descendant of each (e.g. nginx's master and its
# workers, varnishd's manager and its cache process).
proc_tree() {
	local p c
	for p in "$@"; do
		echo "$p"
		for c in $(pgrep -P "$p" || true); do proc_tree "$c"; done
	done
}

# cpu_ticks PID... sums utime + stime of the processes (/proc/PID/stat counts every thread, also
# those that have exited; per-task files would miss those).
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/"$p"/stat 2>/dev/null || echo 0))); done; echo "$t"; }

# write_big_json FILE writes the gzip cells' body: 20 KB of JSON (records alike in shape, not in
# values), readable by nginx's workers (nobody).
write_big_json() {
  awk 'BEGIN { printf "["; for (i = 0; i < 200; i++) printf "%s{\"id\":%d,\"state\":\"at transfer hub %d\",\"zone\":\"%d\",\"step\":%d,\"eta\":\"2026-12-%02dT%02d:00:00Z\"}", (i ? "," : ""), i * 7919 % 100003, i % 17, i % 91, i % 5, i % 28 + 1, i % 24; print "]" }' >"$1"
  chmod a+x "$(dirname "$1")" && chmod a+r "$1"
}

# us_per TICKS N prints the CPU microseconds per unit (request, handshake) of TICKS spent on N.
us_per() { awk -v d="$1" -v t="$(getconf CLK_TCK)" -v n="$2" 'BEGIN { printf "%.1f", (n > 0 ? d / t / n * 1e6 : 0) }'; }

# write_json PATH writes its standard input to PATH atomically (a temp file in the same directory,
# then a rename) after checking that no figure in it is empty; call it only when every round passed.
write_json() {
	local path=$1 tmp
	mkdir -p "$(dirname "$path")"
	tmp=$(mktemp "$path.XXXXXX")
	cat >"$tmp"
	# An empty figure (a round that printed nothing) shows as ": ," or ": }"; awk prints nan/inf.
	if ! grep -q '^[[:space:]]*{' "$tmp" || grep -Eq ':[[:space:]]*[,}]|:[[:space:]]*$|:[[:space:]]*[-+]?(nan|inf)' "$tmp"; then
		echo "--- $tmp" >&2; cat "$tmp" >&2
		rm -f "$tmp"
		bench_fail "the result is not a complete JSON object (a figure is empty or not a number)"
	fi
	chmod 644 "$tmp"
	mv -f "$tmp" "$path"
	echo "wrote $path"
}
