// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* decap.c: switchyard's XDP decapsulator for backends. Strips IPIP, IPv4-in-IPv6 and IP6IP6
 * addressed to one of this host's tunnel addresses ("decap_addrs") and passes the inner packet to
 * the stack, which then sees the client's packet to the VIP (bound on loopback) and answers the
 * client directly. Anything else passes untouched. Hosts whose kernel has no IPIP module (or that
 * would rather not create tunnel devices) use it instead of ipip/ip6tnl interfaces. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "include/consts.h"
#include "include/structs.h"
#include "include/parse.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct decap_key);
	__type(value, __u32);
} decap_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DCNT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} decap_counters SEC(".maps");

static __always_inline int dcount(__u32 idx, __u64 bytes, int verdict)
{
	struct counter *c = bpf_map_lookup_elem(&decap_counters, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
	return verdict;
}

/* strip removes outer bytes after the Ethernet header (length l2, a constant) and rewrites the
 * Ethernet header in front of the inner packet with the inner EtherType. */
static __always_inline int strip_l2(struct xdp_md *ctx, __u32 outer, __u16 inner_proto, const __u32 l2)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + l2 > data_end)
		return -1;
	__u8 hdr[ETH_HLEN + 4];
	__builtin_memcpy(hdr, data, l2);
	if (bpf_xdp_adjust_head(ctx, (int)outer))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2 > data_end)
		return -1;
	__builtin_memcpy(data, hdr, l2);
	__be16 *proto = data + l2 - 2;
	*proto = bpf_htons(inner_proto);
	return 0;
}

static __always_inline int strip(struct xdp_md *ctx, const struct packet *p, __u32 outer, __u16 inner_proto)
{
	if (p->has_vlan)
		return strip_l2(ctx, outer, inner_proto, ETH_HLEN + 4);
	return strip_l2(ctx, outer, inner_proto, ETH_HLEN);
}

static __always_inline int is_decap_addr(const struct flow_key *f)
{
	struct decap_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	k.family = f->family;
	return bpf_map_lookup_elem(&decap_addrs, &k) != NULL;
}

SEC("xdp")
int xdp_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct packet p = {};
	if (parse_eth(data, data_end, &p))
		return dcount(DCNT_PASS, len, XDP_PASS);
	if (p.eth_proto == ETH_P_IP) {
		if (parse_ipv4(data, data_end, &p) || p.flow.proto != IPPROTO_IPIP_)
			return dcount(DCNT_PASS, len, XDP_PASS);
		if (!is_decap_addr(&p.flow))
			return dcount(DCNT_PASS, len, XDP_PASS);
		if (p.ip_opts || p.frag || strip(ctx, &p, IPV4_HDR_LEN, ETH_P_IP))
			return dcount(DCNT_DROP, len, XDP_DROP);
		return dcount(DCNT_DECAP_V4, len, XDP_PASS);
	}
	if (p.eth_proto == ETH_P_IPV6) {
		if (parse_ipv6(data, data_end, &p))
			return dcount(DCNT_PASS, len, XDP_PASS);
		if (p.flow.proto != IPPROTO_IPIP_ && p.flow.proto != IPPROTO_IPV6_)
			return dcount(DCNT_PASS, len, XDP_PASS);
		if (!is_decap_addr(&p.flow))
			return dcount(DCNT_PASS, len, XDP_PASS);
		int v4 = p.flow.proto == IPPROTO_IPIP_;
		if (strip(ctx, &p, IPV6_HDR_LEN, v4 ? ETH_P_IP : ETH_P_IPV6))
			return dcount(DCNT_DROP, len, XDP_DROP);
		return dcount(v4 ? DCNT_DECAP_4IN6 : DCNT_DECAP_6IN6, len, XDP_PASS);
	}
	return dcount(DCNT_PASS, len, XDP_PASS);
}
