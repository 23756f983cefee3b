// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* bench.c: the programs bench-xdp runs (docs/xdp.md, "Benchmark"), in an object of their own so
 * that nothing in production loads them.
 * xdp_lb_bench, xdp_lb_bench_flows: the forwarder under the BPF_PROG_TEST_RUN wrappers of
 *   include/bench.h. They inline the forwarder's code, so this object is built from its source
 *   (lb.c, included below, with xdp_lb and the maps); the benchmark loads it with the forwarder's
 *   own maps in place of the copies declared here (loader.LoadBenchFor).
 * xdp_macswap: the minimal XDP_TX program.
 * xdp_lookup_floor: xdp_macswap plus one LRU-hash lookup, the connection-table floor.
 * xdp_lookup_floor_cold: the same lookup in a table of 2^20 flows, a flow after another, so that
 *   it finds its entry cold in the cache: the floor of the many-flows case. */
#include "lb.c" /* also the licence */
#include "include/bench.h"

/* xdp_lb_bench and xdp_lb_bench_flows run the forwarder and undo its encapsulation after each
 * pass, so that every pass measures the same work; the flows variant then moves the frame on to
 * the next of 2^20 flows. The Go benchmark checks the per-CPU counters to prove that every pass
 * took the expected path. */
BENCH_WRAPPER(xdp_lb_bench, process, 0)
BENCH_WRAPPER(xdp_lb_bench_flows, process, 1)

/* bench_macswap swaps the frame's Ethernet addresses: the minimal XDP_TX work. */
static __attribute__((always_inline)) inline void bench_macswap(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

SEC("xdp")
int xdp_macswap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	bench_macswap(eth);
	return XDP_TX;
}

/* xdp_lookup_floor is a benchmark reference only: a MAC swap plus one lookup in an LRU hash with
 * the IPv4 connection table's key size (16 bytes), i.e. the least any connection-tracking
 * forwarder must do per established packet. The benchmark reports the forwarder against it as
 * well as against xdp_macswap. */
struct floor_key {
	__u32 w[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct floor_key);
	__type(value, __u64);
} floor_table SEC(".maps");

SEC("xdp")
int xdp_lookup_floor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct floor_key *k = data + sizeof(*eth);
	if ((void *)(k + 1) > data_end)
		return XDP_DROP;
	struct floor_key key = *k;
	__u64 *v = bpf_map_lookup_elem(&floor_table, &key);
	if (!v)
		return XDP_DROP;
	bench_macswap(eth);
	return XDP_TX;
}

/* floor_cold_table has the connection table's size (bench_test.go, benchConnTable), so that its
 * hash has as many buckets; the benchmark fills 2^20 flows. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4 << 20);
	__type(key, struct floor_key);
	__type(value, __u64);
} floor_cold_table SEC(".maps");

/* xdp_lookup_floor_cold is a benchmark reference only: xdp_lookup_floor's work on the flow the
 * frame carries (the 16 bytes from the IPv4 source address: addresses, ports, sequence number),
 * then the frame moves on to the next of 2^20 flows (bench_next_flow, as the many-flows case's
 * wrapper does), so consecutive passes touch unrelated entries. */
SEC("xdp")
int xdp_lookup_floor_cold(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct floor_key *k = data + sizeof(*eth) + 12;
	if ((void *)(k + 1) > data_end)
		return XDP_DROP;
	struct floor_key key = *k;
	__u64 *v = bpf_map_lookup_elem(&floor_cold_table, &key);
	if (!v)
		return XDP_DROP;
	bench_macswap(eth);
	bench_next_flow(ctx);
	return XDP_TX;
}
