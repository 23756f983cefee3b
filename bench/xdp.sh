#!/usr/bin/env bash
# bench-xdp: ns/packet of the XDP forwarder through BPF_PROG_TEST_RUN (1e6 repeats a round, every
# pass's path verified by counters), beside a minimal MAC-swap XDP_TX program measured in the same
# rounds, and the Maglev table build for 1,000 backends at size 65537. Prints a table and writes
# bench/out/xdp.json. A second reference, lookup_floor (a MAC swap plus one LRU lookup with the
# connection table's key size), shows what any connection-tracking forwarder pays, and
# lookup_floor_cold (the same lookup over the many-flows case's 2^20 flows, a flow a pass, so the
# entry is cold in the cache) what it pays when the table does not fit in the cache. Needs root.
# The run fails, and writes no JSON, when a benchmark fails (a pass that took another path than
# the measured one fails it: verdict and counters are checked), skips (not root, no BPF) or gives
# fewer rounds than asked for a case. BENCH_SMOKE=1: one round of 1e5 repeats.
# KATRAN_DIR (Katran's BPF sources, never copied into this tree) is handed to the benchmarks for the Katran rows
# (built there at bench time with Katran's flags, loader/katran_bench_test.go); unset, they are
# skipped with a message. Every BenchmarkXDP case named katran_* becomes a <case>_ns key, and the
# same-run ratios switchyard/Katran are written with the range of their per-round values.
# The benchmark runs pinned to one CPU (XDP_CPU, default 1) with taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=xdp
. bench/lib.sh
ROUNDS=${ROUNDS:-5}
REPEATS=1000000 BUILDS=3
XDP_CPU=${XDP_CPU:-1}
if is_smoke; then ROUNDS=1 REPEATS=100000 BUILDS=1; fi
[ "$(id -u)" = 0 ] || bench_fail "needs root (BPF_PROG_TEST_RUN)"
KATRAN_CASES=""
if [ -n "${KATRAN_DIR:-}" ]; then
  [ -d "$KATRAN_DIR" ] || bench_fail "KATRAN_DIR=$KATRAN_DIR is not a directory"
  [ -f "$KATRAN_DIR/lib/bpf/balancer.bpf.c" ] || bench_fail "KATRAN_DIR=$KATRAN_DIR has no lib/bpf/balancer.bpf.c (point it at Katran's BPF sources)"
  command -v clang >/dev/null || bench_fail "the Katran rows need clang (apt-get install clang)"
  KATRAN_DIR=$(cd "$KATRAN_DIR" && pwd)
  export KATRAN_DIR
  KATRAN_CASES="katran_pass katran_new_flow katran_new_flow_insert katran_new_flows_distinct katran_established katran_many_flows"
else
  echo "xdp bench: Katran rows skipped: KATRAN_DIR is not set (point it at Katran's BPF sources)"
fi
raw=$(mktemp)
bin=$(mktemp -d)
trap 'rm -rf "$raw" "$raw.json" "$bin"' EXIT
go test -c -o "$bin/loader.test" ./loader/ || bench_fail "go test -c ./loader/ failed"
# -count runs every case once a round, in turn, so the cases (switchyard's, then Katran's on the
# same frame) alternate. Pinned: Katran's LRU is per CPU, and one CPU makes the rounds comparable.
(cd loader && taskset -c "$XDP_CPU" "$bin/loader.test" -test.run '^$' -test.bench 'BenchmarkXDP' \
  -test.benchtime "${REPEATS}x" -test.count "$ROUNDS") >>"$raw" 2>&1 ||
  { cat "$raw" >&2; bench_fail "BenchmarkXDP failed (a pass took another path, or the programs did not load)"; }
go test ./internal/maglev/ -run '^$' -bench 'BenchmarkBuild1000' -benchtime "${BUILDS}x" -count "$ROUNDS" >>"$raw" 2>&1 ||
  { cat "$raw" >&2; bench_fail "go test -bench BenchmarkBuild1000 failed"; }
if grep -E -- '--- (SKIP|FAIL)' "$raw" >&2; then bench_fail "a benchmark skipped or failed (above)"; fi
# Every case must have given a figure in every round.
for c in pass new_flow new_flows_distinct established many_flows icmp_ptb guard_drop guard_flood minimal lookup_floor lookup_floor_cold $KATRAN_CASES; do
  n=$(grep -cE "^BenchmarkXDP/$c(-[0-9]+)? .* ns/pkt" "$raw" || true)
  [ "$n" = "$ROUNDS" ] || { cat "$raw" >&2; bench_fail "case $c gave $n of $ROUNDS rounds"; }
done
n=$(grep -c '^BenchmarkBuild1000.* ns/op' "$raw" || true)
[ "$n" = "$ROUNDS" ] || { cat "$raw" >&2; bench_fail "maglev build gave $n of $ROUNDS rounds"; }
katran=$(awk '/^BenchmarkXDP\/katran_/ { split($1, a, "/"); sub(/-[0-9]+$/, "", a[2]); print a[2] }' "$raw" | sort -u | tr '\n' ' ')
if [ -n "${KATRAN_DIR:-}" ] && [ -z "$katran" ]; then
  bench_fail "KATRAN_DIR is set but the benchmarks gave no Katran rows"
fi

# Ratios: name numerator denominator (the same-run ratio of medians, and the range of the ratio
# round by round). The Katran ones only when its rows are there.
ratios="pass_ratio pass minimal guard_drop_vs_pass guard_drop pass guard_flood_vs_pass guard_flood pass new_flow_ratio new_flow minimal established_ratio established minimal icmp_ptb_ratio icmp_ptb minimal many_flows_ratio many_flows minimal established_vs_floor established lookup_floor many_flows_vs_cold_floor many_flows lookup_floor_cold"
if [ -n "$katran" ]; then
  ratios="$ratios established_vs_katran established katran_established new_flow_vs_katran_insert new_flow katran_new_flow_insert new_flow_vs_katran new_flow katran_new_flow new_flows_distinct_vs_katran new_flows_distinct katran_new_flows_distinct many_flows_vs_katran many_flows katran_many_flows pass_vs_katran pass katran_pass katran_pass_ratio katran_pass minimal katran_established_ratio katran_established minimal"
fi

awk -v out="$raw.json" -v smoke="$(smoke_json)" -v katran="$katran" -v ratios="$ratios" -v repeats="$REPEATS" '
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
	nk = split("pass new_flow new_flows_distinct established many_flows icmp_ptb guard_drop guard_flood minimal lookup_floor lookup_floor_cold " katran, order, " ")
	for (k = 1; k <= nk; k++) { c = order[k]; delete t; for (i = 1; i <= n[c]; i++) t[i] = v[c, i]; med[c] = median(t, n[c]) }
	build = median(mb, nb)
	printf "%-24s %10s %12s %s\n", "case", "ns/packet", "x minimal", "(rounds: min-max)"
	for (k = 1; k <= nk; k++) {
		c = order[k]; lo = hi = v[c, 1]
		for (i = 2; i <= n[c]; i++) { if (v[c, i] < lo) lo = v[c, i]; if (v[c, i] > hi) hi = v[c, i] }
		printf "%-24s %10.1f %12.2f (%g-%g)\n", c, med[c], med[c] / med["minimal"], lo, hi
	}
	json = ""
	for (k = 1; k <= nk; k++) json = json sprintf("\"%s_ns\": %.1f, ", order[k], med[order[k]])
	nr = split(ratios, r, " ")
	printf "%-28s %8s %s\n", "same-run ratio", "median", "(per round: min-max)"
	for (q = 1; q + 2 <= nr; q += 3) {
		name = r[q]; x1 = r[q+1]; x2 = r[q+2]; lo = hi = v[x1, 1] / v[x2, 1]
		for (i = 2; i <= n[x1] && i <= n[x2]; i++) { x = v[x1, i] / v[x2, i]; if (x < lo) lo = x; if (x > hi) hi = x }
		printf "%-28s %8.2f (%.2f-%.2f)\n", name, med[x1] / med[x2], lo, hi
		json = json sprintf("\"%s\": %.2f, \"%s_range\": [%.2f, %.2f], ", name, med[x1] / med[x2], name, lo, hi)
	}
	printf "%-24s %10.1f ms (1,000 backends, size 65537)\n", "maglev build", build
	printf "rounds: %d, %s repeats each; median per case\n", n["minimal"], repeats
	printf "{%s\"maglev_build_ms\": %.1f, \"rounds\": %d, \"smoke\": %s}\n", json, build, n["minimal"], smoke > out
}' "$raw"
write_json bench/out/xdp.json <"$raw.json"
echo "xdp.json: $(cat bench/out/xdp.json)"
