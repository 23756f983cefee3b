// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* dnsxdp.c: xdp_dns, the DNS stop's answer path in the driver (docs/dns.md, "XDP answer path").
 * It answers UDP queries to the server's listener whose answer userspace has packed and put in
 * answers, and passes every other packet to the socket unchanged. The key is what fully
 * determines a static answer: the lower-cased wire qname, qtype, qclass (IN only) and the EDNS
 * shape (no OPT, or an OPT of version 0 with DO=0 and no options; any UDP size, since the
 * program copies at most DNS_WIRE_MAX = 512 bytes, which fit every client's limit). The value is
 * the packed response with the ID zeroed, RD and CD clear and the qname lower-cased; the program
 * patches in the query's ID, RD and CD bits and the qname's letter case (0x20 randomisation), and
 * writes a correct UDP checksum from the partial sum userspace stored (IPv4 and IPv6).
 *
 * An answer is valid only in the generation it was packed in: listener's gen moves on every
 * reload before the new zones serve, so an answer of the old zones is never sent after a reload
 * (userspace then deletes the stale entries). What passes, and why, is counted (enum
 * dns_pass_reason); answers are counted by the entry's counter slot (answer_counters), which userspace maps to
 * the switchyard_dns_queries_total series of the answer. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "include/parse.h"
#include "include/csum.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define DNS_HDR 12
/* The question's bytes after the header: the name, qtype and qclass, an optional plain OPT
 * that may carry one DNS COOKIE option (RFC 7873: an 8-byte client cookie, or 16-40 bytes with
 * a server cookie). The server does not implement cookies, so, as RFC 7873 5.2 and RFC 6891
 * 6.1.2 ask, it ignores the option and answers as to the plain OPT: resolvers such as BIND and
 * dig send a cookie with every query, and would otherwise never be answered here. */
#define DNS_OPT_LEN 11
#define DNS_COOKIE_OPT 10
#define DNS_COOKIE_MAX 40
#define DNS_QTAIL_MAX (DNS_NAME_MAX + 4 + DNS_OPT_LEN + 4 + DNS_COOKIE_MAX)

/* Sizes Go must know (generated into loader/dnsxdp). */
enum dns_limits {
	DNS_NAME_MAX = 255,    /* a wire name, root label included */
	DNS_WIRE_MAX = 512,    /* the largest answer the program sends */
	DNS_COUNTERS = 4096,   /* answer counter slots */
	DNS_ANSWERS_MAX = 65536, /* entries of answers (an LRU) */
};

/* Why a packet went to the socket (pass_counters). */
enum dns_pass_reason {
	DNS_PASS_NONE = 0,    /* unused: the parsers return -reason, so no reason is 0 */
	DNS_PASS_NOT_IP,      /* not IPv4 or IPv6 over Ethernet (VLAN, ARP, ...), or its IP header cut */
	DNS_PASS_NOT_OURS,    /* not UDP to the listener's address and port (or IPv4 options/fragments, IPv6 extension headers) */
	DNS_PASS_SHAPE,       /* a header, count, opcode or flag the map does not cover */
	DNS_PASS_NAME,        /* a compressed, bad or too long qname */
	DNS_PASS_CLASS,       /* a class other than IN */
	DNS_PASS_EDNS,        /* an OPT with options, DO=1, version > 0, or other additional records */
	DNS_PASS_MISS,        /* no answer packed for the key (yet) */
	DNS_PASS_STALE,       /* an answer of an older generation (before the last reload) */
	DNS_PASS_ROOM,        /* the frame could not grow to the answer */
	DNS_PASS_OFF,         /* no generation set: userspace is not filling */
	DNS_PASS_MAX,
};

/* The EDNS shape of a query (struct dns_key's shape). */
enum dns_shape {
	DNS_SHAPE_NO_OPT = 0,
	DNS_SHAPE_OPT = 1, /* OPT version 0, DO=0, no options */
};

/* What determines a static answer. name is lower-cased and zero-padded. */
struct dns_key {
	__u8 name[256];
	__be16 qtype;
	__u8 shape;
	__u8 pad;
};

/* A packed answer: len bytes of wire, the ID zeroed, RD and CD clear, the qname lower-cased;
 * csum is the 16-bit one's complement sum (memory order, as csum.h sums) of wire with the qname
 * bytes counted as zero, so the program adds the query's qname back. */
struct dns_answer {
	__u32 gen;
	__u32 counter; /* slot in answer_counters */
	__u16 len;
	__u16 csum;
	__u32 pad;
	__u8 wire[DNS_WIRE_MAX];
};

/* The listener and the generation being served. gen 0 answers nothing. */
struct dns_config {
	__u32 gen;
	__be16 port;
	__u8 has4;
	__u8 has6;
	__be32 addr4;
	__be32 addr6[4];
};

struct dns_counter {
	__u64 packets;
	__u64 bytes;
};

struct go_types {
	enum dns_limits limits;
	enum dns_pass_reason pass_reason;
	enum dns_shape shape;
};
SEC(".go_types") const struct go_types *go_types_ = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DNS_ANSWERS_MAX);
	__type(key, struct dns_key);
	__type(value, struct dns_answer);
} answers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_config);
} listener SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DNS_COUNTERS);
	__type(key, __u32);
	__type(value, struct dns_counter);
} answer_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DNS_PASS_MAX);
	__type(key, __u32);
	__type(value, struct dns_counter);
} pass_counters SEC(".maps");

/* Per-CPU scratch: the key and the query's bytes after the header (too large for the stack). */
struct dns_scratch {
	struct dns_key key;
	__u8 q[512 + 32]; /* indexed with & 0x1ff plus at most 19 */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dns_scratch);
} scratch SEC(".maps");

/* What the program keeps of the query's headers to build the answer's: the addresses, ports and
 * IPv4 TOS as parse.h read them into p, and the MAC addresses. */
struct dns_hdrs {
	struct packet p;
	__u8 dst_mac[ETH_ALEN];
	__u8 src_mac[ETH_ALEN];
	__u32 l3; /* header bytes before the UDP payload (untagged, no IP options: 14 + 20 + 8 or 14 + 40 + 8) */
	__u8 v6;
};

static __always_inline int pass(__u32 reason, __u32 len)
{
	struct dns_counter *c = bpf_map_lookup_elem(&pass_counters, &reason);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	return XDP_PASS;
}

/* to_listener says whether the packet parse.h read into p is addressed to the listener. */
static __always_inline int to_listener(const struct dns_config *cfg, const struct packet *p)
{
	if (p->flow.family == FAMILY_V4)
		return cfg->has4 && p->flow.dst[0] == cfg->addr4;
	return cfg->has6 && p->flow.dst[0] == cfg->addr6[0] && p->flow.dst[1] == cfg->addr6[1] &&
	       p->flow.dst[2] == cfg->addr6[2] && p->flow.dst[3] == cfg->addr6[3];
}

/* parse_l3 checks, with parse.h, that the frame is UDP to the listener and fills h; it returns the
 * UDP payload's length, or a negative pass reason: DNS_PASS_NOT_IP for a frame whose IP header
 * cannot be read here (not IP, VLAN-tagged, cut short), DNS_PASS_NOT_OURS for every other frame
 * not answered. The answer is built for an untagged frame with a plain IP header, so a tag, IPv4
 * options, a fragment or an IPv6 extension header leave the query to the socket; so do UDP
 * lengths other than the IP payload's (the socket would see other bytes than the program read). */
static __always_inline int parse_l3(struct xdp_md *ctx, struct dns_config *cfg, struct dns_hdrs *h)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct packet *p = &h->p;
	if (parse_eth(data, data_end, p) || p->has_vlan)
		return -DNS_PASS_NOT_IP;
	struct ethhdr *eth = data; /* in the frame: parse_eth checked */
	__builtin_memcpy(h->dst_mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(h->src_mac, eth->h_source, ETH_ALEN);
	int err;
	if (p->eth_proto == ETH_P_IP)
		err = parse_ipv4(data, data_end, p);
	else if (p->eth_proto == ETH_P_IPV6)
		err = parse_ipv6(data, data_end, p);
	else
		return -DNS_PASS_NOT_IP;
	if (err == PARSE_TRUNC)
		return -DNS_PASS_NOT_IP;
	if (err || p->ip_opts || p->frag || p->flow.proto != IPPROTO_UDP_ || !to_listener(cfg, p))
		return -DNS_PASS_NOT_OURS;
	int udp_len = parse_udp(data, data_end, p);
	if (udp_len < 0 || udp_len != ip_payload(p) || p->flow.dport != cfg->port || p->flow.sport == 0)
		return -DNS_PASS_NOT_OURS;
	h->v6 = p->flow.family == FAMILY_V6;
	h->l3 = p->l4_off + sizeof(struct udphdr);
	return udp_len - sizeof(struct udphdr);
}

/* dns_walk_name walks the qname's labels in s->q (tail bytes): lengths up to 63 (no compression
 * pointer), the name at most 255 bytes. It returns the name's length, root label included, or
 * -DNS_PASS_NAME. A global function, so the verifier checks it once: inlined, each of its exits
 * would be followed through the rest of the program. */
__attribute__((noinline)) int dns_walk_name(struct dns_scratch *s, __u32 tail)
{
	if (!s)
		return -DNS_PASS_NAME;
	__u32 pos = 0;
	for (int l = 0; l < 128; l++) {
		/* barrier_var (bpf_helpers.h) keeps clang from dropping a mask it proves redundant:
		 * the verifier tracks another copy of the register and needs it. */
		__u32 at = pos;
		barrier_var(at);
		__u8 c = s->q[at & 0x1ff];
		if (c == 0)
			return pos + 1;
		if (c > 63)
			return -DNS_PASS_NAME;
		pos += c + 1;
		if (pos >= DNS_NAME_MAX || pos >= tail)
			return -DNS_PASS_NAME;
	}
	return -DNS_PASS_NAME; /* 128 labels without the root */
}

/* dns_lower_name lower-cases the first nlen bytes of s->q into the key (length bytes, <= 63,
 * are never letters) and returns their share of the checksum: the name starts at offset 12 of
 * the payload, so even i is the low byte of a word in memory order. Global, as dns_walk_name. */
__attribute__((noinline)) int dns_lower_name(struct dns_scratch *s, __u32 nlen)
{
	if (!s)
		return -1;
	int sum = 0;
	for (int i = 0; i < DNS_NAME_MAX; i++) {
		if (i >= nlen)
			break;
		__u8 b = s->q[i];
		s->key.name[i] = (b >= 'A' && b <= 'Z') ? b + 32 : b;
		sum += (i & 1) ? ((int)b << 8) : b;
	}
	return sum;
}

/* parse_query reads the DNS header and question into s (the key lower-cased, s->q the query's
 * bytes after the header as sent) and returns the qname's length, or a negative pass reason.
 * *qsum gets the qname's share of the checksum, *flags the query's header bytes 2 and 3. */
static __always_inline int parse_query(struct xdp_md *ctx, struct dns_hdrs *h, __u32 plen,
				       struct dns_scratch *s, __u64 *qsum, __u16 *id, __u8 *flags)
{
	__u8 hdr[DNS_HDR];
	if (plen < DNS_HDR + 1 + 4 || plen > DNS_HDR + DNS_QTAIL_MAX)
		return -DNS_PASS_SHAPE;
	if (bpf_xdp_load_bytes(ctx, h->l3, hdr, DNS_HDR))
		return -DNS_PASS_SHAPE;
	/* QR=0, opcode QUERY, AA=TC=0 (RD free); byte 3: RA, Z and rcode 0 (AD, CD free). */
	if ((hdr[2] & 0xfe) || (hdr[3] & 0xcf))
		return -DNS_PASS_SHAPE;
	/* QDCOUNT 1, ANCOUNT 0, NSCOUNT 0, ARCOUNT 0 or 1. */
	if (hdr[4] || hdr[5] != 1 || hdr[6] || hdr[7] || hdr[8] || hdr[9] || hdr[10] || hdr[11] > 1)
		return -DNS_PASS_SHAPE;
	__u32 tail = plen - DNS_HDR;
	if (tail > DNS_QTAIL_MAX || tail < 5)
		return -DNS_PASS_SHAPE;
	if (bpf_xdp_load_bytes(ctx, h->l3 + DNS_HDR, s->q, tail))
		return -DNS_PASS_SHAPE;
	int nl = dns_walk_name(s, tail);
	if (nl < 0)
		return nl;
	if (nl < 1 || nl > DNS_NAME_MAX)
		return -DNS_PASS_NAME;
	__u32 nlen = nl;
	int sum = dns_lower_name(s, nlen);
	if (sum < 0)
		return -DNS_PASS_NAME;
	__u32 at;
	__u32 rest = tail - nlen;
	if (hdr[11] == 0 && rest != 4)
		return -DNS_PASS_SHAPE; /* trailing bytes, or a cut question */
	__u32 clen = 0; /* a cookie option's length */
	if (hdr[11] == 1 && rest != 4 + DNS_OPT_LEN) {
		clen = rest - (4 + DNS_OPT_LEN + 4);
		if (rest < 4 + DNS_OPT_LEN + 4 + 8 || (clen != 8 && (clen < 16 || clen > DNS_COOKIE_MAX)))
			return -DNS_PASS_EDNS; /* options other than one cookie, or not an OPT */
	}
	at = nlen;
	barrier_var(at);
	__u8 *qt = &s->q[at & 0x1ff];
	if (qt[2] != 0 || qt[3] != 1)
		return -DNS_PASS_CLASS;
	s->key.qtype = (__be16)(qt[0] | (qt[1] << 8));
	if (hdr[11] == 0) {
		s->key.shape = DNS_SHAPE_NO_OPT;
	} else {
		__u8 *o = qt + 4;
		/* root owner, type 41, any UDP size (class), TTL 0 (ext rcode, version 0, DO=0, Z), RDLEN 0
		 * or one COOKIE option filling it */
		if (o[0] != 0 || o[1] != 0 || o[2] != 41 || o[5] || o[6] || o[7] || o[8])
			return -DNS_PASS_EDNS;
		if (clen == 0 && (o[9] || o[10]))
			return -DNS_PASS_EDNS;
		if (clen != 0 && (o[9] || o[10] != clen + 4 || o[11] || o[12] != DNS_COOKIE_OPT || o[13] || o[14] != clen))
			return -DNS_PASS_EDNS;
		s->key.shape = DNS_SHAPE_OPT;
	}
	*qsum = (__u32)sum;
	*id = (__u16)(hdr[0] | (hdr[1] << 8));
	flags[0] = hdr[2];
	flags[1] = hdr[3];
	return nlen;
}

/* resize makes the frame h->l3 + len bytes long: at the tail if the frame has room there, else
 * at the head (the headers are rewritten anyway). */
static __always_inline int resize(struct xdp_md *ctx, struct dns_hdrs *h, __u32 len)
{
	int have = (int)(ctx->data_end - ctx->data);
	int delta = (int)(h->l3 + len) - have;
	if (delta == 0)
		return 0;
	if (bpf_xdp_adjust_tail(ctx, delta) == 0)
		return 0;
	if (delta > 0 && bpf_xdp_adjust_head(ctx, -delta) == 0)
		return 0;
	return -1;
}

/* write_headers writes the answer's Ethernet, IP and UDP headers (addresses and ports swapped)
 * and returns the UDP checksum's partial sum of the pseudo-header and UDP header. */
static __always_inline int write_headers(struct xdp_md *ctx, struct dns_hdrs *h, __u32 len, __u64 *sum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, h->src_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, h->dst_mac, ETH_ALEN);
	__u16 ulen = len + 8;
	__u64 s = 0;
	struct udphdr *udp;
	if (!h->v6) {
		eth->h_proto = bpf_htons(ETH_P_IP);
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end)
			return -1;
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = h->p.tos;
		ip->tot_len = bpf_htons(20 + ulen);
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000); /* DF */
		ip->ttl = 64;
		ip->protocol = IPPROTO_UDP_;
		ip->check = 0;
		ip->saddr = h->p.flow.dst[0];
		ip->daddr = h->p.flow.src[0];
		ip->check = ipv4_csum(ip);
		udp = (void *)(ip + 1);
		s += (h->p.flow.dst[0] & 0xffff) + (h->p.flow.dst[0] >> 16) + (h->p.flow.src[0] & 0xffff) + (h->p.flow.src[0] >> 16);
	} else {
		eth->h_proto = bpf_htons(ETH_P_IPV6);
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		*(__be32 *)ip6 = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(ulen);
		ip6->nexthdr = IPPROTO_UDP_;
		ip6->hop_limit = 64;
		__builtin_memcpy(ip6->saddr.in6_u.u6_addr32, h->p.flow.dst, 16);
		__builtin_memcpy(ip6->daddr.in6_u.u6_addr32, h->p.flow.src, 16);
		udp = (void *)(ip6 + 1);
#pragma unroll
		for (int i = 0; i < 4; i++)
			s += (h->p.flow.dst[i] & 0xffff) + (h->p.flow.dst[i] >> 16) + (h->p.flow.src[i] & 0xffff) + (h->p.flow.src[i] >> 16);
	}
	if ((void *)(udp + 1) > data_end)
		return -1;
	udp->source = h->p.flow.dport;
	udp->dest = h->p.flow.sport;
	udp->len = bpf_htons(ulen);
	udp->check = 0;
	/* pseudo-header: protocol and UDP length; UDP header: ports and length. */
	s += bpf_htons(IPPROTO_UDP_) + 2 * (__u64)bpf_htons(ulen) + h->p.flow.sport + h->p.flow.dport;
	*sum = s;
	return 0;
}

SEC("xdp")
int xdp_dns(struct xdp_md *ctx)
{
	__u32 frame = ctx->data_end - ctx->data;
	__u32 zero = 0;
	struct dns_config *cfg = bpf_map_lookup_elem(&listener, &zero);
	struct dns_scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!cfg || !s)
		return XDP_PASS;
	struct dns_hdrs h = {};
	int plen = parse_l3(ctx, cfg, &h);
	if (plen < 0)
		return pass(-plen, frame);
	if (cfg->gen == 0)
		return pass(DNS_PASS_OFF, frame);
	__builtin_memset(&s->key, 0, sizeof(s->key));
	__u64 qsum = 0;
	__u16 id = 0;
	__u8 flags[2] = {};
	int nlen = parse_query(ctx, &h, plen, s, &qsum, &id, flags);
	if (nlen < 0)
		return pass(-nlen, frame);
	struct dns_answer *a = bpf_map_lookup_elem(&answers, &s->key);
	if (!a)
		return pass(DNS_PASS_MISS, frame);
	if (a->gen != cfg->gen)
		return pass(DNS_PASS_STALE, frame);
	__u32 len = a->len;
	if (len < DNS_HDR + (__u32)nlen + 4 || len > DNS_WIRE_MAX)
		return pass(DNS_PASS_MISS, frame);
	__u32 slot = a->counter;
	if (resize(ctx, &h, len))
		return pass(DNS_PASS_ROOM, frame);
	__u64 sum = 0;
	if (write_headers(ctx, &h, len, &sum))
		return XDP_DROP; /* the frame was resized: it cannot go up any more */
	__u32 wl = len;
	barrier_var(wl);
	wl &= 0x3ff;
	if (wl == 0 || wl > DNS_WIRE_MAX || bpf_xdp_store_bytes(ctx, h.l3, a->wire, wl))
		return XDP_DROP;
	__u32 n = nlen;
	barrier_var(n);
	n &= 0xff;
	if (n == 0 || bpf_xdp_store_bytes(ctx, h.l3 + DNS_HDR, s->q, n))
		return XDP_DROP;
	__u8 top[4];
	top[0] = id & 0xff;
	top[1] = id >> 8;
	top[2] = a->wire[2] | (flags[0] & 0x01); /* RD */
	top[3] = a->wire[3] | (flags[1] & 0x10); /* CD */
	if (bpf_xdp_store_bytes(ctx, h.l3, top, 4))
		return XDP_DROP;
	sum += a->csum + qsum + id + (flags[0] & 0x01) + ((__u64)(flags[1] & 0x10) << 8);
	__u16 check = csum_fold(sum);
	if (check == 0)
		check = 0xffff;
	if (bpf_xdp_store_bytes(ctx, h.l3 - 2, &check, 2))
		return XDP_DROP;
	struct dns_counter *c = bpf_map_lookup_elem(&answer_counters, &slot);
	if (c) {
		c->packets++;
		c->bytes += h.l3 + len;
	}
	return XDP_TX;
}
