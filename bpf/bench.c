// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* bench.c: the reference programs bench-xdp times the forwarder against (docs/xdp.md,
 * "Benchmark"), in an object of their own so that nothing in production loads them.
 * xdp_macswap: the minimal XDP_TX program.
 * xdp_lookup_floor: xdp_macswap plus one LRU-hash lookup, the connection-table floor. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int xdp_macswap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__u8 tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
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
	__u8 tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return XDP_TX;
}
