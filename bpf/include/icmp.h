/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp.h: ICMP handled in XDP: echo replies for VIPs, the quoted flow of a frag-needed /
 * packet-too-big message, and generating frag-needed / packet-too-big toward a client whose
 * frame would not fit after encapsulation. */
#pragma once
#include "parse.h"
#include "csum.h"

/* swap_eth turns the frame around: the reply goes back to the MAC it came from. */
static __always_inline int swap_eth(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__u8 tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return 0;
}

/* echo_reply_v4 answers an echo request in place. */
static __always_inline int echo_reply_v4(void *data, void *data_end, const struct packet *p)
{
	__u32 l3 = p->l3_off, l4 = p->l4_off;
	if (l3 > MAX_L3_OFF || l4 > MAX_L4_OFF)
		return -1;
	struct iphdr *ip = data + l3;
	if ((void *)(ip + 1) > data_end)
		return -1;
	struct icmphdr *ic = data + l4;
	if ((void *)(ic + 1) > data_end)
		return -1;
	if (swap_eth(data, data_end))
		return -1;
	__u32 a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	ip->ttl = OUTER_TTL;
	ip->check = 0;
	ip->check = ipv4_csum(ip);
	__u16 old = *(__u16 *)ic;
	ic->type = ICMP_ECHOREPLY_;
	ic->checksum = csum_replace16(ic->checksum, old, *(__u16 *)ic);
	return 0;
}

/* echo_reply_v6 answers an ICMPv6 echo request in place. Swapping the addresses leaves the
 * pseudo-header sum unchanged, so only the type change is folded into the checksum. */
static __always_inline int echo_reply_v6(void *data, void *data_end, const struct packet *p)
{
	__u32 l3 = p->l3_off, l4 = p->l4_off;
	if (l3 > MAX_L3_OFF || l4 > MAX_L4_OFF)
		return -1;
	struct ipv6hdr *ip6 = data + l3;
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	struct icmp6hdr *ic = data + l4;
	if ((void *)(ic + 1) > data_end)
		return -1;
	if (swap_eth(data, data_end))
		return -1;
	struct in6_addr a = ip6->saddr;
	ip6->saddr = ip6->daddr;
	ip6->daddr = a;
	ip6->hop_limit = OUTER_TTL;
	__u16 old = *(__u16 *)ic;
	ic->icmp6_type = ICMPV6_ECHO_REPLY_;
	ic->icmp6_cksum = csum_replace16(ic->icmp6_cksum, old, *(__u16 *)ic);
	return 0;
}

/* quoted_flow reads the packet an ICMP error quotes (an IP header and at least the first 8
 * bytes of its transport header, which hold the ports) and returns the flow of the original
 * client-to-VIP direction: the quoted packet went from the VIP to the client, so addresses and
 * ports are reversed. */
static __always_inline int quoted_flow(void *data, void *data_end, const struct packet *p, struct flow_key *f)
{
	__u32 off = p->l4_off;
	if (off > MAX_L4_OFF)
		return -1;
	off += 8; /* ICMP header */
	__u16 *ports;
	if (p->flow.family == FAMILY_V4) {
		struct iphdr *in = data + off;
		if ((void *)(in + 1) > data_end)
			return -1;
		if (in->ihl != 5)
			return -1;
		f->family = FAMILY_V4;
		f->proto = in->protocol;
		f->src[0] = in->daddr;
		f->dst[0] = in->saddr;
		ports = (void *)(in + 1);
	} else {
		struct ipv6hdr *in = data + off;
		if ((void *)(in + 1) > data_end)
			return -1;
		f->family = FAMILY_V6;
		f->proto = in->nexthdr;
		__builtin_memcpy(f->src, &in->daddr, 16);
		__builtin_memcpy(f->dst, &in->saddr, 16);
		ports = (void *)(in + 1);
	}
	if (f->proto != IPPROTO_TCP_ && f->proto != IPPROTO_UDP_)
		return -1;
	if ((void *)ports + 8 > data_end)
		return -1;
	f->sport = ports[1];
	f->dport = ports[0];
	return 0;
}

/* sum_bytes is the 32-bit one's-complement partial sum of n bytes (n a multiple of 4, checked
 * against data_end by the caller) using the kernel's csum_diff helper. */
static __always_inline __u64 sum_bytes(void *start, __u32 n)
{
	__s64 r = bpf_csum_diff(NULL, 0, start, n, 0);
	return r < 0 ? 0 : (__u64)r;
}

/* reply_frame turns the frame into a reply of l2 + hdr + ICMP_QUOTE_LEN bytes: it makes room for
 * hdr bytes of new headers in front of the offending packet (which stays, as the quote), cuts it
 * to the quote length, and writes the Ethernet header back toward the sender (VLAN tag kept).
 * hdr and l2 are constants at every call site. */
static __always_inline int reply_frame(struct xdp_md *ctx, const struct packet *p, const __u32 l2,
				       const __u32 hdr, __u16 proto)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return -1;
	__u8 smac[ETH_ALEN], dmac[ETH_ALEN];
	__builtin_memcpy(smac, oeth->h_source, ETH_ALEN);
	__builtin_memcpy(dmac, oeth->h_dest, ETH_ALEN);
	__u32 cur = data_end - data + hdr;
	const __u32 want = l2 + hdr + ICMP_QUOTE_LEN;
	if (bpf_xdp_adjust_head(ctx, -(int)hdr))
		return -1;
	if (cur < want || bpf_xdp_adjust_tail(ctx, -(int)(cur - want)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, smac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, dmac, ETH_ALEN);
	if (l2 > ETH_HLEN) {
		struct vlan_hdr_ *vh = (void *)(eth + 1);
		if ((void *)(vh + 1) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_8021Q);
		vh->tci = p->vlan_tci;
		vh->proto = bpf_htons(proto);
	} else {
		eth->h_proto = bpf_htons(proto);
	}
	return 0;
}

/* send_toobig answers a frame that would exceed the MTU after encapsulation with ICMP
 * frag-needed (IPv4) or packet-too-big (IPv6) from the VIP to the client, quoting the first
 * ICMP_QUOTE_LEN bytes of the offending packet, and turns the frame around (XDP_TX).
 * l2 is the Ethernet header length, passed as a constant. */
static __always_inline int send_toobig_l2(struct xdp_md *ctx, const struct packet *p, __u16 mtu, const __u32 l2)
{
	if (p->flow.family == FAMILY_V4) {
		const __u32 hdr = IPV4_HDR_LEN + 8;
		if (reply_frame(ctx, p, l2, hdr, ETH_P_IP))
			return -1;
		void *data = (void *)(long)ctx->data;
		void *data_end = (void *)(long)ctx->data_end;
		if (data + l2 + hdr + ICMP_QUOTE_LEN > data_end)
			return -1;
		struct iphdr *ip = data + l2;
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = 0;
		ip->tot_len = bpf_htons(hdr + ICMP_QUOTE_LEN);
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = OUTER_TTL;
		ip->protocol = IPPROTO_ICMP_;
		ip->check = 0;
		ip->saddr = p->flow.dst[0];
		ip->daddr = p->flow.src[0];
		ip->check = ipv4_csum(ip);
		struct icmphdr *ic = (void *)(ip + 1);
		ic->type = ICMP_DEST_UNREACH_;
		ic->code = ICMP_FRAG_NEEDED_;
		ic->checksum = 0;
		ic->un.frag.__unused = 0;
		ic->un.frag.mtu = bpf_htons(mtu);
		ic->checksum = csum_fold(sum_bytes(ic, 8 + ICMP_QUOTE_LEN));
		return 0;
	}

	const __u32 hdr = IPV6_HDR_LEN + 8;
	if (reply_frame(ctx, p, l2, hdr, ETH_P_IPV6))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + l2 + hdr + ICMP_QUOTE_LEN > data_end)
		return -1;
	struct ipv6hdr *ip6 = data + l2;
	ip6->version = 6;
	ip6->priority = 0;
	ip6->flow_lbl[0] = 0;
	ip6->flow_lbl[1] = 0;
	ip6->flow_lbl[2] = 0;
	ip6->payload_len = bpf_htons(8 + ICMP_QUOTE_LEN);
	ip6->nexthdr = IPPROTO_ICMPV6_;
	ip6->hop_limit = OUTER_TTL;
	__builtin_memcpy(&ip6->saddr, p->flow.dst, 16);
	__builtin_memcpy(&ip6->daddr, p->flow.src, 16);
	struct icmp6hdr *ic = (void *)(ip6 + 1);
	ic->icmp6_type = ICMPV6_PKT_TOOBIG_;
	ic->icmp6_code = 0;
	ic->icmp6_cksum = 0;
	ic->icmp6_mtu = bpf_htonl(mtu);
	/* Pseudo-header: addresses, upper-layer length, next header. */
	__u64 s = sum_bytes(&ip6->saddr, 32);
	s += bpf_htons(8 + ICMP_QUOTE_LEN);
	s += bpf_htons(IPPROTO_ICMPV6_);
	s += sum_bytes(ic, 8 + ICMP_QUOTE_LEN);
	ic->icmp6_cksum = csum_fold(s);
	return 0;
}

static __always_inline int send_toobig(struct xdp_md *ctx, const struct packet *p, __u16 mtu)
{
	if (p->has_vlan)
		return send_toobig_l2(ctx, p, mtu, ETH_HLEN + 4);
	return send_toobig_l2(ctx, p, mtu, ETH_HLEN);
}
