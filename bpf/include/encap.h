/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* encap.h: IPIP, IPv4-in-IPv6 and IP6IP6 encapsulation for direct server return. The frame
 * grows at the head by the outer IP header (and the second-chance option when there is one); the Ethernet header is written anew (next-hop MAC as
 * destination, interface MAC as source, the original VLAN tag kept) and the inner packet is left
 * byte for byte as it arrived. */
#pragma once
#include "parse.h"
#include "csum.h"
#include "hash.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "encap.h builds header words in little-endian memory order (bpfel)"
#endif

/* write_eth writes the Ethernet header (and the VLAN tag) with word stores: struct ethhdr is
 * packed, so field copies would compile to a load and a store per byte. Each MAC is read from cfg
 * as a 32-bit and a 16-bit word (if_mac at offset 0, nexthop_mac at 6; x86 loads them unaligned
 * at no cost, and the verifier does not ask for alignment there). The caller has checked the
 * frame holds the Ethernet header, the tag and the outer IP header: no bounds check of its own. */
static __always_inline void write_eth(void *data, __u8 has_vlan, __u16 tci, const struct lb_config *cfg, __u16 proto)
{
	const __u8 *m = (const __u8 *)cfg;
	__u16 *e = data;
	*(__u32 *)data = *(const __u32 *)(m + 6); /* destination: the next hop */
	e[2] = *(const __u16 *)(m + 10);
	*(__u32 *)(data + 6) = *(const __u32 *)m; /* source: this interface */
	e[5] = *(const __u16 *)(m + 4);
	if (has_vlan) {
		e[6] = bpf_htons(ETH_P_8021Q);
		e[7] = tci;
		e[8] = bpf_htons(proto);
	} else {
		e[6] = bpf_htons(proto);
	}
}

/* encap_overhead is what encapsulation toward a backend of this family adds. */
static __always_inline __u32 encap_overhead(const struct backend *be)
{
	return be->family == FAMILY_V6 ? IPV6_HDR_LEN : IPV4_HDR_LEN;
}

/* sc_overhead is what carrying a second candidate adds to an outer header of this family. */
static __always_inline __u32 sc_overhead(const struct backend *be)
{
	return be->family == FAMILY_V6 ? SC_DSTOPT_LEN : SC_OPT4_LEN;
}

/* What encapsulation needs of the inner packet. A local of the caller's that never leaves the
 * inlined code, so the compiler keeps it in registers: the established IPv4 path (lb.c, fast4)
 * fills it straight from the frame, the general path from its struct packet (inner_of). */
struct inner {
	__u32 entropy; /* flow_entropy */
	__u16 len;     /* the inner IP packet's length */
	__u16 tci;     /* VLAN tag, network order; valid when has_vlan */
	__u8 has_vlan;
	__u8 tos;      /* IPv4 TOS or IPv6 traffic class */
	__u8 proto;    /* outer header's next protocol: IPPROTO_IPIP_ or IPPROTO_IPV6_ */
};

static __always_inline struct inner inner_of(const struct packet *p)
{
	struct inner in = {
		.entropy = flow_entropy(&p->flow),
		.len = p->l3_len,
		.tci = p->vlan_tci,
		.has_vlan = p->has_vlan,
		.tos = p->tos,
		.proto = p->flow.family == FAMILY_V4 ? IPPROTO_IPIP_ : IPPROTO_IPV6_,
	};
	return in;
}

/* encap4 writes an outer IPv4 header (IPIP, or IPv4 carrying IPv6), with the second-chance option
 * naming cand when sc is 1. l2 and sc are constants at every call site. */
static __always_inline int encap4(struct xdp_md *ctx, const struct inner *in, const struct backend *be,
				  const struct backend *cand, const struct lb_config *cfg, const __u32 l2, const int sc)
{
	const __u32 hlen = IPV4_HDR_LEN + (sc ? SC_OPT4_LEN : 0);
	__u32 entropy = in->entropy;
	__u8 inner_proto = in->proto;
	__u16 tci = in->tci;
	__u8 has_vlan = in->has_vlan;
	__u16 inner_len = in->len;
	__u8 tos = in->tos;
	__u32 cand4 = cand ? cand->addr[0] : 0;

	if (bpf_xdp_adjust_head(ctx, -(int)hlen))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l2;
	if ((void *)ip + hlen > data_end)
		return -1;
	write_eth(data, has_vlan, tci, cfg, ETH_P_IP); /* l2 + hlen checked above */
	__u32 mask = cfg->src4_mask;
	__u32 src = bpf_htonl((bpf_ntohl(cfg->src4) & ~mask) | (entropy & mask));
	if (!sc) {
		/* The 20-byte header as five 32-bit words in memory order, its checksum summed from
		 * the same words in registers: no byte or bitfield stores, nothing read back. */
		__u32 dst = be->addr[0];
		__u32 w0 = 0x45 | ((__u32)tos << 8) | ((__u32)bpf_htons(inner_len + hlen) << 16);
		__u32 w2 = OUTER_TTL | ((__u32)inner_proto << 8);
		__u64 sum = (__u64)(w0 & 0xffff) + (w0 >> 16) + w2 + (src & 0xffff) + (src >> 16) +
			    (dst & 0xffff) + (dst >> 16);
		__u32 *w = (__u32 *)ip;
		w[0] = w0;
		w[1] = 0; /* id 0, no fragment bits */
		w[2] = w2 | ((__u32)csum_fold(sum) << 16);
		w[3] = src;
		w[4] = dst;
		return 0;
	}
	ip->version = 4;
	ip->ihl = hlen / 4;
	ip->tos = tos;
	ip->tot_len = bpf_htons(inner_len + hlen);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = OUTER_TTL;
	ip->protocol = inner_proto;
	ip->check = 0;
	ip->saddr = src;
	ip->daddr = be->addr[0];
	if (sc) {
		__u8 *opt = (void *)(ip + 1);
		opt[0] = SC_OPT_TYPE;
		opt[1] = SC_OPT4_LEN;
		*(__be16 *)(opt + 2) = bpf_htons(SC_MAGIC);
		*(__u32 *)(opt + 4) = cand4;
	}
	ip->check = sc ? ipv4_csum_opt(ip) : ipv4_csum(ip);
	return 0;
}

/* encap6 writes an outer IPv6 header, followed by the second-chance destination-options header
 * naming cand when sc is 1. */
static __always_inline int encap6(struct xdp_md *ctx, const struct inner *in, const struct backend *be,
				  const struct backend *cand, const struct lb_config *cfg, const __u32 l2, const int sc)
{
	const __u32 hlen = IPV6_HDR_LEN + (sc ? SC_DSTOPT_LEN : 0);
	__u32 entropy = in->entropy;
	__u8 inner_proto = in->proto;
	__u16 tci = in->tci;
	__u8 has_vlan = in->has_vlan;
	__u16 inner_len = in->len;
	__u8 tos = in->tos;
	__u32 c[4] = {};
	if (cand)
		__builtin_memcpy(c, cand->addr, 16);

	if (bpf_xdp_adjust_head(ctx, -(int)hlen))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l2;
	if ((void *)ip6 + hlen > data_end)
		return -1;
	write_eth(data, has_vlan, tci, cfg, ETH_P_IPV6); /* l2 + hlen checked above */
	ip6->version = 6;
	ip6->priority = tos >> 4;
	ip6->flow_lbl[0] = ((tos & 0xf) << 4) | ((entropy >> 16) & 0xf);
	ip6->flow_lbl[1] = (entropy >> 8) & 0xff;
	ip6->flow_lbl[2] = entropy & 0xff;
	ip6->payload_len = bpf_htons(inner_len + (hlen - IPV6_HDR_LEN));
	ip6->nexthdr = sc ? IPPROTO_DSTOPTS_ : inner_proto;
	ip6->hop_limit = OUTER_TTL;
	__u32 *s = (__u32 *)&ip6->saddr;
	s[0] = cfg->src6[0];
	s[1] = cfg->src6[1];
	s[2] = cfg->src6[2];
	s[3] = bpf_htonl(entropy);
	__builtin_memcpy(&ip6->daddr, be->addr, 16);
	if (sc) {
		__u8 *d = (void *)(ip6 + 1);
		d[0] = inner_proto;
		d[1] = SC_DSTOPT_LEN / 8 - 1;
		d[2] = SC_OPT_TYPE;
		d[3] = SC_OPT6_LEN;
		*(__be16 *)(d + 4) = bpf_htons(SC_MAGIC);
		d[6] = 0;
		d[7] = 0;
		__builtin_memcpy(d + 8, c, 16);
	}
	return 0;
}

static __always_inline int encap_l2(struct xdp_md *ctx, const struct inner *in, const struct backend *be,
				    const struct backend *cand, const struct lb_config *cfg, const __u32 l2)
{
	if (be->family == FAMILY_V4)
		return cand ? encap4(ctx, in, be, cand, cfg, l2, 1) : encap4(ctx, in, be, cand, cfg, l2, 0);
	return cand ? encap6(ctx, in, be, cand, cfg, l2, 1) : encap6(ctx, in, be, cand, cfg, l2, 0);
}

/* encap wraps the packet for the backend, carrying cand (same family as be) as the second
 * candidate when it is not NULL. The Ethernet header length is passed on as a constant so that
 * the verifier sees fixed offsets. */
static __always_inline int encap(struct xdp_md *ctx, const struct inner *in, const struct backend *be,
				 const struct backend *cand, const struct lb_config *cfg)
{
	if (in->has_vlan)
		return encap_l2(ctx, in, be, cand, cfg, ETH_HLEN + 4);
	return encap_l2(ctx, in, be, cand, cfg, ETH_HLEN);
}
