/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* encap.h: IPIP, IPv4-in-IPv6 and IP6IP6 encapsulation for direct server return. The frame
 * grows at the head by the outer IP header; the Ethernet header is written anew (next-hop MAC as
 * destination, interface MAC as source, the original VLAN tag kept) and the inner packet is left
 * byte for byte as it arrived. */
#pragma once
#include "parse.h"
#include "csum.h"
#include "hash.h"

static __always_inline int write_eth(void *data, void *data_end, __u8 has_vlan, __u16 tci,
				     const struct lb_config *cfg, __u16 proto)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, cfg->nexthop_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->if_mac, ETH_ALEN);
	if (has_vlan) {
		struct vlan_hdr_ *vh = (void *)(eth + 1);
		if ((void *)(vh + 1) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_8021Q);
		vh->tci = tci;
		vh->proto = bpf_htons(proto);
	} else {
		eth->h_proto = bpf_htons(proto);
	}
	return 0;
}

/* encap_overhead is what encapsulation toward a backend of this family adds. */
static __always_inline __u32 encap_overhead(const struct backend *be)
{
	return be->family == FAMILY_V6 ? IPV6_HDR_LEN : IPV4_HDR_LEN;
}

/* encap wraps the packet for the backend. l2 is the Ethernet header length (14 or 18), passed as
 * a constant so that the verifier sees fixed offsets. */
static __always_inline int encap_l2(struct xdp_md *ctx, const struct packet *p, const struct backend *be,
				    const struct lb_config *cfg, const __u32 l2)
{
	__u32 entropy = flow_entropy(&p->flow);
	__u8 inner_proto = p->flow.family == FAMILY_V4 ? IPPROTO_IPIP_ : IPPROTO_IPV6_;
	__u16 tci = p->vlan_tci;
	__u8 has_vlan = p->has_vlan;
	__u16 inner_len = p->l3_len;
	__u8 tos = p->tos;

	if (be->family == FAMILY_V4) {
		if (bpf_xdp_adjust_head(ctx, -(int)IPV4_HDR_LEN))
			return -1;
		void *data = (void *)(long)ctx->data;
		void *data_end = (void *)(long)ctx->data_end;
		struct iphdr *ip = data + l2;
		if ((void *)(ip + 1) > data_end)
			return -1;
		if (write_eth(data, data_end, has_vlan, tci, cfg, ETH_P_IP))
			return -1;
		__u32 mask = cfg->src4_mask;
		__u32 src = bpf_htonl((bpf_ntohl(cfg->src4) & ~mask) | (entropy & mask));
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = tos;
		ip->tot_len = bpf_htons(inner_len + IPV4_HDR_LEN);
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = OUTER_TTL;
		ip->protocol = inner_proto;
		ip->check = 0;
		ip->saddr = src;
		ip->daddr = be->addr[0];
		ip->check = ipv4_csum(ip);
		return 0;
	}

	if (bpf_xdp_adjust_head(ctx, -(int)IPV6_HDR_LEN))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l2;
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	if (write_eth(data, data_end, has_vlan, tci, cfg, ETH_P_IPV6))
		return -1;
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
	__builtin_memcpy(&ip6->daddr, be->addr, 16);
	return 0;
}

static __always_inline int encap(struct xdp_md *ctx, const struct packet *p, const struct backend *be,
				 const struct lb_config *cfg)
{
	if (p->has_vlan)
		return encap_l2(ctx, p, be, cfg, ETH_HLEN + 4);
	return encap_l2(ctx, p, be, cfg, ETH_HLEN);
}
