#!/usr/bin/env bash
# bench-xdp: ns/packet of the XDP forwarder through BPF_PROG_TEST_RUN (1e6 repeats a round, every
# pass's path verified by counters), beside a minimal MAC-swap XDP_TX program measured in the same
# rounds, and the Maglev table build for 1,000 backends at size 65537. Prints a table and writes
# bench/out/xdp.json. A second reference, lookup_floor (a MAC swap plus one LRU lookup with the
# connection table's key size), shows what any connection-tracking forwarder pays. Needs root.
# The run fails, and writes no JSON, when a benchmark fails (a pass that took another path than
# the measured one fails it: verdict and counters are checked), skips (not root, no BPF) or gives
# fewer rounds than asked for a case. BENCH_SMOKE=1: one round of 1e5 repeats.
# KATRAN_DIR (Katran's BPF sources, issue 14) is handed to the benchmarks for the Katran rows;
# unset, they are skipped with a message. Every BenchmarkXDP case named katran_* becomes a
# <case>_ns key.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=xdp
. bench/lib.sh
ROUNDS=${ROUNDS:-5}
REPEATS=1000000 BUILDS=3
if is_smoke; then ROUNDS=1 REPEATS=100000 BUILDS=1; fi
[ "$(id -u)" = 0 ] || bench_fail "needs root (BPF_PROG_TEST_RUN)"
if [ -n "${KATRAN_DIR:-}" ]; then
  [ -d "$KATRAN_DIR" ] || bench_fail "KATRAN_DIR=$KATRAN_DIR is not a directory"
  export KATRAN_DIR
else
  echo "xdp bench: Katran rows skipped: KATRAN_DIR is not set (point it at Katran's BPF sources)"
fi
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.json"' EXIT
# -count runs every case once a round, in turn, so the cases alternate.
go test ./loader/ -run '^$' -bench 'BenchmarkXDP' -benchtime "${REPEATS}x" -count "$ROUNDS" >>"$raw" 2>&1 ||
  { cat "$raw" >&2; bench_fail "go test -bench BenchmarkXDP failed (a pass took another path, or the programs did not load)"; }
go test ./maps/maglev/ -run '^$' -bench 'BenchmarkBuild1000' -benchtime "${BUILDS}x" -count "$ROUNDS" >>"$raw" 2>&1 ||
  { cat "$raw" >&2; bench_fail "go test -bench BenchmarkBuild1000 failed"; }
if grep -E -- '--- (SKIP|FAIL)' "$raw" >&2; then bench_fail "a benchmark skipped or failed (above)"; fi
# Every case must have given a figure in every round.
for c in pass new_flow established icmp_ptb minimal lookup_floor; do
  n=$(grep -cE "^BenchmarkXDP/$c(-[0-9]+)? .* ns/pkt" "$raw" || true)
  [ "$n" = "$ROUNDS" ] || { cat "$raw" >&2; bench_fail "case $c gave $n of $ROUNDS rounds"; }
done
n=$(grep -c '^BenchmarkBuild1000.* ns/op' "$raw" || true)
[ "$n" = "$ROUNDS" ] || { cat "$raw" >&2; bench_fail "maglev build gave $n of $ROUNDS rounds"; }
katran=$(awk '/^BenchmarkXDP\/katran_/ { split($1, a, "/"); sub(/-[0-9]+$/, "", a[2]); print a[2] }' "$raw" | sort -u | tr '\n' ' ')
if [ -n "${KATRAN_DIR:-}" ] && [ -z "$katran" ]; then
  bench_fail "KATRAN_DIR is set but the benchmarks gave no Katran rows"
fi

awk -v out="$raw.json" -v smoke="$(smoke_json)" -v katran="$katran" '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j-1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j-1]; arr[j-1] = t }
	return (n % 2) ? arr[(n+1)/2] : (arr[n/2] + arr[n/2+1]) / 2
}
/^BenchmarkXDP\// {
	split($1, a, "/"); name = a[2]; sub(/-[0-9]+$/, "", name)
	for (i = 1; i <= NF; i++) if ($(i+1) == "ns/pkt") { n[name]++; v[name, n[name]] = $i }
}
/^BenchmarkBuild1000/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ns/op") { nb++; mb[nb] = $i / 1e6 } }
END {
	nk = split("pass new_flow established icmp_ptb minimal lookup_floor " katran, order, " ")
	for (k = 1; k <= nk; k++) { c = order[k]; delete t; for (i = 1; i <= n[c]; i++) t[i] = v[c, i]; med[c] = median(t, n[c]) }
	build = median(mb, nb)
	printf "%-14s %10s %12s\n", "case", "ns/packet", "x minimal"
	for (k = 1; k <= nk; k++) { c = order[k]; printf "%-14s %10.1f %12.2f\n", c, med[c], med[c] / med["minimal"] }
	printf "established / lookup_floor (a MAC swap plus one connection-table-sized LRU lookup): %.2f\n", med["established"] / med["lookup_floor"]
	printf "%-14s %10.1f ms (1,000 backends, size 65537)\n", "maglev build", build
	printf "rounds: %d, %s repeats each; median per case\n", n["minimal"], "'"$REPEATS"'"
	extra = ""
	for (k = 7; k <= nk; k++) extra = extra sprintf("\"%s_ns\": %.1f, ", order[k], med[order[k]])
	printf "{\"pass_ns\": %.1f, \"new_flow_ns\": %.1f, \"established_ns\": %.1f, \"icmp_ptb_ns\": %.1f, \"minimal_ns\": %.1f, \"pass_ratio\": %.2f, \"new_flow_ratio\": %.2f, \"established_ratio\": %.2f, \"icmp_ptb_ratio\": %.2f, \"lookup_floor_ns\": %.1f, \"established_vs_floor\": %.2f, \"maglev_build_ms\": %.1f, %s\"rounds\": %d, \"smoke\": %s}\n",
		med["pass"], med["new_flow"], med["established"], med["icmp_ptb"], med["minimal"],
		med["pass"] / med["minimal"], med["new_flow"] / med["minimal"], med["established"] / med["minimal"], med["icmp_ptb"] / med["minimal"], med["lookup_floor"], med["established"] / med["lookup_floor"], build, extra, n["minimal"], smoke > out
}' "$raw"
write_json bench/out/xdp.json <"$raw.json"
echo "xdp.json: $(cat bench/out/xdp.json)"
