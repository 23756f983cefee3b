// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* probe.c: tc_probe_encap, the balancer's TC (clsact egress) program for health checks through
 * the tunnel (docs/xdp.md, "Health checks through the tunnel"). The daemon's checker connects to
 * VIP:port from a socket marked with SO_MARK = PROBE_MARK_BASE | n; this program finds backend n
 * in probe_targets and wraps the packet toward it as the forwarder wraps real traffic (IPIP,
 * IPv4-in-IPv6, IPv6-in-IPv4 or IP6IP6, the outer source from the forwarder's encap_source ranges, the frame
 * sent to the next hop's MAC; it reads the forwarder's own "config" map). The backend decapsulates
 * it, answers from the VIP straight to the balancer's address (DSR), and the forwarder's XDP
 * program passes the answer (it is not to a VIP). So a backend without the VIP on lo, or without
 * the decap program, fails its check. Packets without a probe mark are left untouched, for the
 * next program on the interface (TC_ACT_UNSPEC, which TCX reads as "next"); an encapsulated probe
 * ends the chain (TC_ACT_OK), so that it is never wrapped twice. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "include/consts.h"
#include "include/structs.h"
#include "include/csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The marks of probe sockets: PROBE_MARK_BASE in the bits of PROBE_MARK_MASK, the target's index
 * in the others (control/health and the daemon use the same values, generated into Go). */
enum probe_mark {
	PROBE_MARK_BASE = 0x53590000, /* "SY" */
	PROBE_MARK_MASK = 0xffff0000,
};

/* What became of marked packets (probe_counters). */
enum probe_counter_index {
	PCNT_ENCAP_IPIP = 0, /* IPv4 in IPv4 */
	PCNT_ENCAP_4IN6,     /* IPv4 in IPv6 */
	PCNT_ENCAP_6IN6,     /* IPv6 in IPv6 */
	PCNT_ENCAP_6IN4,     /* IPv6 in IPv4 */
	PCNT_NO_TARGET,      /* probe mark without a target: dropped (it would reach the VIP untunnelled) */
	PCNT_ERROR,          /* not IP, no config, or the kernel refused to grow the packet: dropped */
	PCNT_MAX,
};

/* A probe target: the backend's tunnel address (of family, zero-padded to 16 bytes). */
struct probe_target {
	__u32 addr[4];
	__u8 family; /* FAMILY_V4 or FAMILY_V6 */
	__u8 pad[3];
};

struct go_types {
	enum probe_mark probe_mark;
	enum probe_counter_index probe_counter_index;
	enum family family;
};
SEC(".go_types") const struct go_types *go_types_ = 0;

/* mark -> target, filled by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct probe_target);
} probe_targets SEC(".maps");

/* The forwarder's frame config (the loader passes its map in): MACs and outer sources, so that a
 * probe is framed exactly as real traffic. Same shape as "config" of bpf/include/maps.h. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PCNT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} probe_counters SEC(".maps");

static __always_inline int count(struct __sk_buff *skb, __u32 idx, int verdict)
{
	struct counter *c = bpf_map_lookup_elem(&probe_counters, &idx);
	if (c) {
		c->packets++;
		c->bytes += skb->len;
	}
	return verdict;
}

static __always_inline int zero_mac(const __u8 *m)
{
	return !(m[0] | m[1] | m[2] | m[3] | m[4] | m[5]);
}

/* outer4 builds the outer IPv4 header of a packet whose inner IP packet is inner_len bytes. */
static __always_inline void outer4(struct iphdr *ip, const struct probe_target *t, const struct lb_config *cfg,
				   __u8 tos, __u16 inner_len, __u8 inner_proto, __u32 entropy)
{
	__u32 mask = cfg->src4_mask;
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tos;
	ip->tot_len = bpf_htons(inner_len + IPV4_HDR_LEN);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = inner_proto;
	ip->check = 0;
	ip->saddr = bpf_htonl((bpf_ntohl(cfg->src4) & ~mask) | (entropy & mask));
	ip->daddr = t->addr[0];
	ip->check = ipv4_csum(ip);
}

/* outer6 builds the outer IPv6 header, as encap6 of include/encap.h does for real traffic. */
static __always_inline void outer6(struct ipv6hdr *ip6, const struct probe_target *t, const struct lb_config *cfg,
				   __u8 tos, __u16 inner_len, __u8 inner_proto, __u32 entropy)
{
	ip6->version = 6;
	ip6->priority = tos >> 4;
	ip6->flow_lbl[0] = ((tos & 0xf) << 4) | ((entropy >> 16) & 0xf);
	ip6->flow_lbl[1] = (entropy >> 8) & 0xff;
	ip6->flow_lbl[2] = entropy & 0xff;
	ip6->payload_len = bpf_htons(inner_len);
	ip6->nexthdr = inner_proto;
	ip6->hop_limit = OUTER_TTL;
	__u32 *s = (__u32 *)&ip6->saddr;
	s[0] = cfg->src6[0];
	s[1] = cfg->src6[1];
	s[2] = cfg->src6[2];
	s[3] = bpf_htonl(entropy);
	__builtin_memcpy(&ip6->daddr, t->addr, 16);
}

/* inner_info reads the inner packet's family, traffic class and length. */
static __always_inline int inner_info(struct __sk_buff *skb, __u8 *proto, __u8 *tos, __u16 *len)
{
	__u8 b[6];
	if (bpf_skb_load_bytes(skb, ETH_HLEN, b, sizeof(b)))
		return -1;
	if (skb->protocol == bpf_htons(ETH_P_IP) && (b[0] >> 4) == 4) {
		*proto = IPPROTO_IPIP_;
		*tos = b[1];
		*len = ((__u16)b[2] << 8) | b[3];
		return 0;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6) && (b[0] >> 4) == 6) {
		*proto = IPPROTO_IPV6_;
		*tos = (b[0] << 4) | (b[1] >> 4);
		*len = (((__u16)b[4] << 8) | b[5]) + IPV6_HDR_LEN;
		return 0;
	}
	return -1;
}

SEC("tc")
int tc_probe_encap(struct __sk_buff *skb)
{
	__u32 mark = skb->mark;
	/* Not a probe: the next program of the interface's chain, if any, decides (TCX_NEXT). */
	if ((mark & PROBE_MARK_MASK) != PROBE_MARK_BASE)
		return TC_ACT_UNSPEC;
	struct probe_target *t = bpf_map_lookup_elem(&probe_targets, &mark);
	if (!t)
		return count(skb, PCNT_NO_TARGET, TC_ACT_SHOT);
	__u32 zero = 0;
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	__u8 proto, tos;
	__u16 inner_len;
	if (!cfg || inner_info(skb, &proto, &tos, &inner_len))
		return count(skb, PCNT_ERROR, TC_ACT_SHOT);
	int v6 = t->family == FAMILY_V6;
	__u32 entropy = bpf_get_hash_recalc(skb);
	__u32 hlen = v6 ? IPV6_HDR_LEN : IPV4_HDR_LEN;
	__u64 flags = v6 ? BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 : BPF_F_ADJ_ROOM_ENCAP_L3_IPV4;
	if (bpf_skb_adjust_room(skb, hlen, BPF_ADJ_ROOM_MAC, flags))
		return count(skb, PCNT_ERROR, TC_ACT_SHOT);
	struct ethhdr eth;
	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)))
		return count(skb, PCNT_ERROR, TC_ACT_SHOT);
	if (!zero_mac(cfg->nexthop_mac)) { /* as real traffic; until it is resolved, the kernel's */
		__builtin_memcpy(eth.h_dest, cfg->nexthop_mac, ETH_ALEN);
		__builtin_memcpy(eth.h_source, cfg->if_mac, ETH_ALEN);
	}
	eth.h_proto = bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP);
	if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0))
		return count(skb, PCNT_ERROR, TC_ACT_SHOT);
	if (v6) {
		struct ipv6hdr ip6 = {};
		outer6(&ip6, t, cfg, tos, inner_len, proto, entropy);
		if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6), 0))
			return count(skb, PCNT_ERROR, TC_ACT_SHOT);
		return count(skb, proto == IPPROTO_IPIP_ ? PCNT_ENCAP_4IN6 : PCNT_ENCAP_6IN6, TC_ACT_OK);
	}
	struct iphdr ip = {};
	outer4(&ip, t, cfg, tos, inner_len, proto, entropy);
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip, sizeof(ip), 0))
		return count(skb, PCNT_ERROR, TC_ACT_SHOT);
	return count(skb, proto == IPPROTO_IPIP_ ? PCNT_ENCAP_IPIP : PCNT_ENCAP_6IN4, TC_ACT_OK);
}
