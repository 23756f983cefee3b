/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* parse.h: bounds-checked header parsing, the one parser of every program (the forwarder, decap
 * and the DNS answer path). Every access is checked against data_end before it is made. A parser
 * returns 0 (parse_udp: the UDP length) or one of two errors, so that a caller can tell a frame it
 * cannot read from one it read and refuses: PARSE_TRUNC, the header does not fit in the frame (or
 * is not there: a transport other than TCP or UDP for parse_ports); PARSE_BAD, the header is there
 * but its version or lengths are wrong. */
#pragma once
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"

/* Minimal ICMP headers (the uapi ones pull in libc socket headers). */
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	union {
		struct {
			__be16 id;
			__be16 sequence;
		} echo;
		struct {
			__be16 __unused;
			__be16 mtu;
		} frag;
	} un;
};

struct icmp6hdr {
	__u8 icmp6_type;
	__u8 icmp6_code;
	__sum16 icmp6_cksum;
	__be32 icmp6_mtu;
};

#define PARSE_TRUNC (-1)
#define PARSE_BAD (-2)

/* Offsets kept in struct packet are reloaded from the stack, where the verifier no longer knows
 * their range; every use bounds them again against these limits first. */
#define MAX_L3_OFF (ETH_HLEN + 4)
#define MAX_L4_OFF (MAX_L3_OFF + 60)

struct vlan_hdr_ {
	__be16 tci;
	__be16 proto;
};

/* What a program knows about a frame after parsing. */
struct packet {
	struct flow_key flow;
	__u32 l3_off;    /* offset of the IP header */
	__u32 l4_off;    /* offset of the transport header */
	__u16 l3_len;    /* IP total length (v4) or 40 + payload length (v6) */
	__u16 eth_proto; /* host order: ETH_P_IP or ETH_P_IPV6 */
	__u16 vlan_tci;  /* network order; valid when has_vlan */
	__u8 has_vlan;
	__u8 tos;        /* IPv4 TOS or IPv6 traffic class */
	__u8 tcp_flags;
	__u8 df;         /* IPv4 don't-fragment bit set */
	__u8 ip_opts;    /* IPv4 header has options */
	__u8 frag;       /* IPv4 fragment or IPv6 fragment header */
};

/* parse_eth reads the Ethernet header and at most one 802.1Q/802.1ad tag (p->has_vlan: a
 * program that does not handle tags refuses it there). */
static __always_inline int parse_eth(void *data, void *data_end, struct packet *p)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return PARSE_TRUNC;
	__u16 proto = bpf_ntohs(eth->h_proto);
	__u32 off = sizeof(*eth);
	if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
		struct vlan_hdr_ *vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return PARSE_TRUNC;
		p->has_vlan = 1;
		p->vlan_tci = vh->tci;
		proto = bpf_ntohs(vh->proto);
		off += sizeof(*vh);
	}
	p->eth_proto = proto;
	p->l3_off = off;
	return 0;
}

/* parse_ipv4 reads an IPv4 header at p->l3_off. It records options and fragments instead of
 * rejecting them: whether they matter depends on whether the packet is toward a VIP. */
static __always_inline int parse_ipv4(void *data, void *data_end, struct packet *p)
{
	__u32 off = p->l3_off;
	if (off > MAX_L3_OFF)
		return PARSE_TRUNC;
	struct iphdr *ip = data + off;
	if ((void *)(ip + 1) > data_end)
		return PARSE_TRUNC;
	if (ip->version != 4 || ip->ihl < 5)
		return PARSE_BAD;
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < ip->ihl * 4)
		return PARSE_BAD;
	/* The IP length must fit in the frame (trailing Ethernet padding is allowed). */
	if (data + off + tot > data_end)
		return PARSE_BAD;
	p->ip_opts = ip->ihl != 5;
	__u16 frag = bpf_ntohs(ip->frag_off);
	p->frag = (frag & (IP_MF | IP_OFFMASK)) != 0;
	p->df = (frag & IP_DF) != 0;
	p->flow.family = FAMILY_V4;
	p->flow.proto = ip->protocol;
	p->flow.src[0] = ip->saddr;
	p->flow.dst[0] = ip->daddr;
	p->tos = ip->tos;
	p->l3_len = tot;
	p->l4_off = off + ip->ihl * 4;
	return 0;
}

/* parse_ipv6 reads a fixed IPv6 header. Extension headers other than a fragment header are not
 * walked: the next header must be the transport (or a fragment header, recorded in p->frag). */
static __always_inline int parse_ipv6(void *data, void *data_end, struct packet *p)
{
	__u32 off = p->l3_off;
	if (off > MAX_L3_OFF)
		return PARSE_TRUNC;
	struct ipv6hdr *ip6 = data + off;
	if ((void *)(ip6 + 1) > data_end)
		return PARSE_TRUNC;
	if (ip6->version != 6)
		return PARSE_BAD;
	__u16 plen = bpf_ntohs(ip6->payload_len);
	if (data + off + sizeof(*ip6) + plen > data_end)
		return PARSE_BAD;
	p->flow.family = FAMILY_V6;
	p->flow.proto = ip6->nexthdr;
	p->frag = ip6->nexthdr == IPPROTO_FRAGMENT_;
	__builtin_memcpy(p->flow.src, &ip6->saddr, 16);
	__builtin_memcpy(p->flow.dst, &ip6->daddr, 16);
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	p->l3_len = sizeof(*ip6) + plen;
	p->l4_off = off + sizeof(*ip6);
	return 0;
}

/* ip_payload is the length of the IP payload after the header at p->l3_off: the IP length less
 * the IP header (and, for IPv6, nothing else: extension headers are not walked). */
static __always_inline __u32 ip_payload(const struct packet *p)
{
	return p->l3_len - (p->l4_off - p->l3_off);
}

/* parse_udp reads a UDP header at p->l4_off: the ports into p->flow. It returns the UDP length,
 * PARSE_TRUNC when the header is cut, PARSE_BAD when the length is shorter than the header or
 * longer than the IP payload, which parse_ipv4 and parse_ipv6 checked is in the frame. */
static __always_inline int parse_udp(void *data, void *data_end, struct packet *p)
{
	__u32 off = p->l4_off;
	if (off > MAX_L4_OFF)
		return PARSE_TRUNC;
	__u32 payload = ip_payload(p);
	struct udphdr *uh = data + off;
	if ((void *)(uh + 1) > data_end)
		return PARSE_TRUNC;
	p->flow.sport = uh->source;
	p->flow.dport = uh->dest;
	__u32 len = bpf_ntohs(uh->len);
	if (len < sizeof(*uh) || len > payload)
		return PARSE_BAD;
	return len;
}

/* parse_ports reads the ports (and TCP flags) of a TCP or UDP header. It returns PARSE_TRUNC
 * when the header is truncated (no ports), PARSE_BAD when the ports were read but the header's
 * lengths do not fit the IP payload: a UDP length of 0, shorter than the UDP header or longer than
 * the IP payload, a TCP data offset below 5 words or reaching past the IP payload. Such a packet is
 * never forwarded (a backend would have to drop it; a tunnel must not carry it). */
static __always_inline int parse_ports(void *data, void *data_end, struct packet *p)
{
	__u32 off = p->l4_off;
	if (off > MAX_L4_OFF)
		return PARSE_TRUNC;
	__u32 payload = ip_payload(p);
	if (p->flow.proto == IPPROTO_TCP_) {
		struct tcphdr *th = data + off;
		if ((void *)(th + 1) > data_end)
			return PARSE_TRUNC;
		p->flow.sport = th->source;
		p->flow.dport = th->dest;
		p->tcp_flags = ((__u8 *)th)[13];
		if (th->doff < 5 || th->doff * 4U > payload)
			return PARSE_BAD;
		return 0;
	}
	if (p->flow.proto == IPPROTO_UDP_) {
		int len = parse_udp(data, data_end, p);
		return len < 0 ? len : 0;
	}
	return PARSE_TRUNC;
}
