// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* decap.c: switchyard's XDP decapsulator for backends. Strips IPIP, IPv4-in-IPv6 and IP6IP6
 * addressed to one of this host's tunnel addresses ("decap_addrs") and passes the inner packet to
 * the stack, which then sees the client's packet to the VIP (bound on loopback) and answers the
 * client directly. A tunnel packet that carries a second candidate (docs/xdp.md, "Second
 * chance") is decapsulated only when this host's stack holds its TCP flow; otherwise it goes on to
 * the candidate, if the allow-lists admit the outer source and the candidate. Anything else passes untouched. Hosts whose kernel has no IPIP module (or that
 * would rather not create tunnel devices) use it instead of ipip/ip6tnl interfaces. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "include/consts.h"
#include "include/structs.h"
#include "include/parse.h"
#include "include/csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The enums Go takes its constants from (consts.h), put in BTF for bpf2go -type as in lb.c. */
struct go_types {
	enum decap_counter_index decap_counter_index;
	enum decap_sc_counter_index decap_sc_counter_index;
	enum decap_sc_refused_index decap_sc_refused_index;
	enum sc_prefix sc_prefix;
	enum family family;
};
SEC(".go_types") const struct go_types *go_types_ = 0;

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DSC_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} decap_sc_counters SEC(".maps");

/* The allow-lists of second chance (docs/xdp.md, "Second chance"): a candidate is forwarded to
 * only when the outer source is in decap_sc_sources (the balancers' encap source ranges) and the
 * candidate is in decap_sc_peers (the backends' networks). Both empty: forwarding is off. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SC_PREFIX_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sc_prefix_key);
	__type(value, __u32);
} decap_sc_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SC_PREFIX_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sc_prefix_key);
	__type(value, __u32);
} decap_sc_sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DSCR_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} decap_sc_refused SEC(".maps");

static __always_inline void sc_refused_count(__u32 idx, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&decap_sc_refused, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* sc_allowed: addr (of the family, zero-padded to 16 bytes) is inside one of the map's prefixes. */
static __always_inline int sc_allowed(void *map, const __u32 *addr, __u8 family)
{
	struct sc_prefix_key k = {};
	k.prefixlen = SC_PREFIX_FULL;
	k.family = family;
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(map, &k) != NULL;
}

static __always_inline void sc_dcount(__u32 idx, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&decap_sc_counters, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

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

/* ---- second chance ---- */

/* What decap knows about a tunnel packet that carries a second candidate. */
struct sc_packet {
	__u32 cand[4];   /* the candidate's address (outer family) */
	__u32 outer;     /* outer header bytes with the option: 28 (IPv4) or 64 (IPv6) */
	__u16 inner_eth; /* EtherType of the inner packet */
	__u8 family;     /* outer family */
};

/* sc_opt4 reads the IPv4 second-chance option of an outer header with options: 0 when it is
 * exactly [0x1E][8][magic][address] (IHL 7), -1 for any other options. */
static __always_inline int sc_opt4(void *data, void *data_end, const __u32 l2, struct sc_packet *sc)
{
	struct iphdr *ip = data + l2;
	__u8 *opt = (void *)(ip + 1);
	if ((void *)(opt + SC_OPT4_LEN) > data_end || ip->ihl != (IPV4_HDR_LEN + SC_OPT4_LEN) / 4)
		return -1;
	if (opt[0] != SC_OPT_TYPE || opt[1] != SC_OPT4_LEN || *(__be16 *)(opt + 2) != bpf_htons(SC_MAGIC))
		return -1;
	sc->cand[0] = *(__u32 *)(opt + 4);
	sc->outer = IPV4_HDR_LEN + SC_OPT4_LEN;
	sc->inner_eth = ETH_P_IP;
	sc->family = FAMILY_V4;
	return 0;
}

/* sc_opt6 reads the IPv6 second-chance destination-options header after the outer header:
 * 0 when it is exactly [next 4|41][2][0x1E][20][magic][0][address]; -2 when it starts with the
 * option type but is otherwise wrong (malformed); -1 for any other destination options (not
 * second chance: such as ip6_tunnel's encapsulation limit, left to the stack). */
static __always_inline int sc_opt6(void *data, void *data_end, const __u32 l2, struct sc_packet *sc)
{
	__u8 *d = data + l2 + IPV6_HDR_LEN;
	if ((void *)(d + 3) > data_end || d[2] != SC_OPT_TYPE)
		return -1;
	if ((void *)(d + SC_DSTOPT_LEN) > data_end)
		return -2;
	if ((d[0] != IPPROTO_IPIP_ && d[0] != IPPROTO_IPV6_) || d[1] != SC_DSTOPT_LEN / 8 - 1 ||
	    d[3] != SC_OPT6_LEN || *(__be16 *)(d + 4) != bpf_htons(SC_MAGIC) || d[6] != 0 || d[7] != 0)
		return -2;
	__builtin_memcpy(sc->cand, d + 8, 16);
	sc->outer = IPV6_HDR_LEN + SC_DSTOPT_LEN;
	sc->inner_eth = d[0] == IPPROTO_IPIP_ ? ETH_P_IP : ETH_P_IPV6;
	sc->family = FAMILY_V6;
	return 0;
}

/* inner_tuple reads the inner packet at offset off (a constant) into a socket tuple. It returns
 * the tuple size for bpf_skc_lookup_tcp, 0 when the packet is not a mid-stream TCP segment
 * (not TCP, a fragment, a SYN without ACK) and -1 when it is truncated. */
static __always_inline int inner_tuple(void *data, void *data_end, const __u32 off, __u16 eth,
				       struct bpf_sock_tuple *t)
{
	struct tcphdr *th;
	if (eth == ETH_P_IP) {
		struct iphdr *ip = data + off;
		if ((void *)(ip + 1) > data_end)
			return -1;
		if (ip->protocol != IPPROTO_TCP_ || (bpf_ntohs(ip->frag_off) & (IP_MF | IP_OFFMASK)))
			return 0;
		__u32 ihl = ip->ihl * 4;
		if (ihl < IPV4_HDR_LEN || ihl > 60)
			return -1;
		th = data + off + ihl;
		if ((void *)(th + 1) > data_end)
			return -1;
		t->ipv4.saddr = ip->saddr;
		t->ipv4.daddr = ip->daddr;
		t->ipv4.sport = th->source;
		t->ipv4.dport = th->dest;
		if (th->syn && !th->ack)
			return 0;
		return sizeof(t->ipv4);
	}
	struct ipv6hdr *ip6 = data + off;
	if ((void *)(ip6 + 1) > data_end)
		return -1;
	if (ip6->nexthdr != IPPROTO_TCP_)
		return 0;
	th = (void *)(ip6 + 1);
	if ((void *)(th + 1) > data_end)
		return -1;
	__builtin_memcpy(t->ipv6.saddr, &ip6->saddr, 16);
	__builtin_memcpy(t->ipv6.daddr, &ip6->daddr, 16);
	t->ipv6.sport = th->source;
	t->ipv6.dport = th->dest;
	if (th->syn && !th->ack)
		return 0;
	return sizeof(t->ipv6);
}

/* owns_flow asks this host's TCP stack (the interface's netns) whether a socket holds the flow:
 * an established, request (SYN received) or time-wait socket does; a listener, or nothing, does
 * not (the stack would answer with a reset). */
static __always_inline int owns_flow(struct xdp_md *ctx, struct bpf_sock_tuple *t, int size)
{
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int owned = sk->state != BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return owned;
}

/* reroute turns a second-chance packet toward its candidate: the option goes (so the packet
 * cannot be sent on again), the outer destination becomes the candidate, the MACs are swapped and
 * the frame goes back out toward the router that brought it. l2, outer and family are constants
 * at each call site. */
static __always_inline int reroute(struct xdp_md *ctx, const struct sc_packet *sc, const __u32 l2, const __u32 v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __u32 hlen = v6 ? IPV6_HDR_LEN : IPV4_HDR_LEN;
	const __u32 optlen = v6 ? SC_DSTOPT_LEN : SC_OPT4_LEN;
	__u8 hdr[ETH_HLEN + 4 + IPV6_HDR_LEN];
	if (data + l2 + hlen + optlen > data_end)
		return -1;
	__builtin_memcpy(hdr, data, l2 + hlen);
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, hdr, ETH_ALEN);
	__builtin_memcpy(hdr, hdr + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(hdr + ETH_ALEN, mac, ETH_ALEN);
	if (v6) {
		struct ipv6hdr *ip6 = (void *)(hdr + l2);
		__u8 *d = data + l2 + IPV6_HDR_LEN;
		ip6->nexthdr = d[0];
		ip6->payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) - SC_DSTOPT_LEN);
		__builtin_memcpy(&ip6->daddr, sc->cand, 16);
	} else {
		struct iphdr *ip = (void *)(hdr + l2);
		ip->ihl = 5;
		ip->tot_len = bpf_htons(bpf_ntohs(ip->tot_len) - SC_OPT4_LEN);
		ip->daddr = sc->cand[0];
		ip->check = 0;
		ip->check = ipv4_csum(ip);
	}
	if (bpf_xdp_adjust_head(ctx, (int)optlen))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + l2 + hlen > data_end)
		return -1;
	__builtin_memcpy(data, hdr, l2 + hlen);
	return 0;
}

/* usable_candidate: a candidate of the outer family that is not zero and not this host. */
static __always_inline int usable_candidate(const struct sc_packet *sc)
{
	if (!(sc->cand[0] | sc->cand[1] | sc->cand[2] | sc->cand[3]))
		return 0;
	struct decap_key k = {};
	__builtin_memcpy(k.addr, sc->cand, 16);
	k.family = sc->family;
	return bpf_map_lookup_elem(&decap_addrs, &k) == NULL;
}

/* second_chance handles a tunnel packet for this host that carries a candidate: decapsulated here
 * when this host owns the flow (or the packet is not mid-stream TCP, or the candidate is
 * unusable, or the outer source or the candidate is not allowed), else sent on to the candidate. */
static __always_inline int second_chance_l2(struct xdp_md *ctx, const struct packet *p, struct sc_packet *sc,
					    const __u32 l2, const __u32 v6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	const __u32 outer = v6 ? IPV6_HDR_LEN + SC_DSTOPT_LEN : IPV4_HDR_LEN + SC_OPT4_LEN;
	struct bpf_sock_tuple t = {};
	int size = inner_tuple(data, data_end, l2 + outer, sc->inner_eth, &t);
	if (size < 0) {
		sc_dcount(DSC_MALFORMED, len);
		return dcount(DCNT_DROP, len, XDP_DROP);
	}
	int verdict = DSC_SKIPPED;
	int refused = -1;
	if (size > 0) {
		if (owns_flow(ctx, &t, size))
			verdict = DSC_OWNED;
		else if (!usable_candidate(sc))
			verdict = DSC_NO_CANDIDATE;
		else if (!sc_allowed(&decap_sc_sources, p->flow.src, sc->family))
			refused = DSCR_SOURCE;
		else if (!sc_allowed(&decap_sc_peers, sc->cand, sc->family))
			refused = DSCR_CANDIDATE;
		else if (reroute(ctx, sc, l2, v6) == 0) {
			sc_dcount(DSC_FORWARDED, len);
			return XDP_TX;
		} else {
			sc_dcount(DSC_MALFORMED, len);
			return dcount(DCNT_DROP, len, XDP_DROP);
		}
	}
	if (refused >= 0)
		sc_refused_count(refused, len);
	else
		sc_dcount(verdict, len);
	if (strip_l2(ctx, outer, sc->inner_eth, l2))
		return dcount(DCNT_DROP, len, XDP_DROP);
	if (!v6)
		return dcount(DCNT_DECAP_V4, len, XDP_PASS);
	return dcount(sc->inner_eth == ETH_P_IP ? DCNT_DECAP_4IN6 : DCNT_DECAP_6IN6, len, XDP_PASS);
}

static __always_inline int second_chance(struct xdp_md *ctx, const struct packet *p, struct sc_packet *sc)
{
	int v6 = sc->family == FAMILY_V6;
	if (p->has_vlan)
		return v6 ? second_chance_l2(ctx, p, sc, ETH_HLEN + 4, 1) : second_chance_l2(ctx, p, sc, ETH_HLEN + 4, 0);
	return v6 ? second_chance_l2(ctx, p, sc, ETH_HLEN, 1) : second_chance_l2(ctx, p, sc, ETH_HLEN, 0);
}

/* sc_options reads the candidate of an IPv4 tunnel packet with options, or of an IPv6 one with a
 * destination-options header: 0 with sc filled, -1 when the options are not a candidate. */
static __always_inline int sc_options(void *data, void *data_end, const struct packet *p, struct sc_packet *sc)
{
	int v6 = p->eth_proto == ETH_P_IPV6;
	if (p->has_vlan)
		return v6 ? sc_opt6(data, data_end, ETH_HLEN + 4, sc) : sc_opt4(data, data_end, ETH_HLEN + 4, sc);
	return v6 ? sc_opt6(data, data_end, ETH_HLEN, sc) : sc_opt4(data, data_end, ETH_HLEN, sc);
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
		if (p.frag)
			return dcount(DCNT_DROP, len, XDP_DROP);
		if (p.ip_opts) {
			struct sc_packet sc = {};
			if (sc_options(data, data_end, &p, &sc)) {
				sc_dcount(DSC_MALFORMED, len);
				return dcount(DCNT_DROP, len, XDP_DROP);
			}
			return second_chance(ctx, &p, &sc);
		}
		if (strip(ctx, &p, IPV4_HDR_LEN, ETH_P_IP))
			return dcount(DCNT_DROP, len, XDP_DROP);
		return dcount(DCNT_DECAP_V4, len, XDP_PASS);
	}
	if (p.eth_proto == ETH_P_IPV6) {
		if (parse_ipv6(data, data_end, &p))
			return dcount(DCNT_PASS, len, XDP_PASS);
		if (p.flow.proto == IPPROTO_DSTOPTS_ && is_decap_addr(&p.flow)) {
			struct sc_packet sc = {};
			int err = sc_options(data, data_end, &p, &sc);
			if (err == -1)
				return dcount(DCNT_PASS, len, XDP_PASS);
			if (err) {
				sc_dcount(DSC_MALFORMED, len);
				return dcount(DCNT_DROP, len, XDP_DROP);
			}
			return second_chance(ctx, &p, &sc);
		}
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
