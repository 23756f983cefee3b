#!/usr/bin/env bash
# bench-xdp: ns/packet of the XDP forwarder through BPF_PROG_TEST_RUN (1e6 repeats a round, every
# pass's path verified by counters), beside a minimal MAC-swap XDP_TX program measured in the same
# rounds, and the Maglev table build for 1,000 backends at size 65537. Prints a table and writes
# bench/out/xdp.json. A second reference, lookup_floor (a MAC swap plus one LRU lookup with the
# connection table's key size), shows what any connection-tracking forwarder pays. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
mkdir -p bench/out
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# -count runs every case once a round, in turn, so the cases alternate.
go test ./loader/ -run '^$' -bench 'BenchmarkXDP' -benchtime 1000000x -count "$ROUNDS" | tee -a "$raw" >/dev/null
go test ./maps/maglev/ -run '^$' -bench 'BenchmarkBuild1000' -benchtime 3x -count "$ROUNDS" | tee -a "$raw" >/dev/null

awk -v out=bench/out/xdp.json '
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
	split("pass new_flow established icmp_ptb minimal lookup_floor", order, " ")
	for (k = 1; k <= 6; k++) { c = order[k]; delete t; for (i = 1; i <= n[c]; i++) t[i] = v[c, i]; med[c] = median(t, n[c]) }
	build = median(mb, nb)
	printf "%-14s %10s %12s\n", "case", "ns/packet", "x minimal"
	for (k = 1; k <= 6; k++) { c = order[k]; printf "%-14s %10.1f %12.2f\n", c, med[c], med[c] / med["minimal"] }
	printf "established / lookup_floor (a MAC swap plus one connection-table-sized LRU lookup): %.2f\n", med["established"] / med["lookup_floor"]
	printf "%-14s %10.1f ms (1,000 backends, size 65537)\n", "maglev build", build
	printf "rounds: %d, 1e6 repeats each; median per case\n", n["minimal"]
	printf "{\"pass_ns\": %.1f, \"new_flow_ns\": %.1f, \"established_ns\": %.1f, \"icmp_ptb_ns\": %.1f, \"minimal_ns\": %.1f, \"pass_ratio\": %.2f, \"new_flow_ratio\": %.2f, \"established_ratio\": %.2f, \"icmp_ptb_ratio\": %.2f, \"lookup_floor_ns\": %.1f, \"established_vs_floor\": %.2f, \"maglev_build_ms\": %.1f, \"rounds\": %d}\n",
		med["pass"], med["new_flow"], med["established"], med["icmp_ptb"], med["minimal"],
		med["pass"] / med["minimal"], med["new_flow"] / med["minimal"], med["established"] / med["minimal"], med["icmp_ptb"] / med["minimal"], med["lookup_floor"], med["established"] / med["lookup_floor"], build, n["minimal"] > out
}' "$raw"
echo "wrote bench/out/xdp.json: $(cat bench/out/xdp.json)"
