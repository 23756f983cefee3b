// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* quicsteer.c: steer_quic, the SK_REUSEPORT program of an HTTP/3 listener's UDP reuseport group
 * (docs/upgrades.md, "HTTP/3 across an upgrade"). Each process generation of a stop holds one
 * socket of the group, at the index of its generation in "steer_socks", and writes its generation
 * into every connection ID it issues (internal/h3): a datagram whose destination connection ID is
 * one of ours goes to the socket of the generation it names, so that QUIC connections a draining
 * process serves keep reaching it; anything else (a client's first Initial, with a random DCID)
 * goes to the newest generation ("steer_newest"). When the chosen socket is gone, the kernel
 * picks one of the group by hash, as without a program.
 *
 * Our connection ID (STEER_CID_LEN bytes): random bytes first (the first with QUIC-LB's
 * unroutable config rotation bits, so that the L4 balancer reads no server ID from it:
 * loader/quicsteer), then the generation, then a two-byte tag that tells it from a client's
 * random DCID in a long header. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The connection ID layout the servers and this program share (bpfobj.Quicsteer*). */
enum steer_cid {
	STEER_CID_LEN = 12, /* bytes of each connection ID a server issues */
	STEER_CID_GEN = 9,  /* the byte with the process generation */
	STEER_CID_TAG = 10, /* two tag bytes follow it */
	STEER_TAG0 = 0x73,  /* 's' */
	STEER_TAG1 = 0x79,  /* 'y' */
	STEER_GENS = 256,   /* generations, one byte */
};

/* Puts enum steer_cid in the object's BTF, for bpf2go to export to Go. */
struct go_types {
	enum steer_cid cid;
};
SEC(".go_types") const struct go_types *go_types_ = 0;

/* Generation -> the socket of the process of that generation. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, STEER_GENS);
	__type(key, __u32);
	__type(value, __u64);
} steer_socks SEC(".maps");

/* [0]: the newest generation, which takes new connections. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} steer_newest SEC(".maps");

enum {
	UDP_HDR = 8,          /* md->data starts at the UDP header */
	QUIC_LONG = 0x80,     /* header form bit */
	LONG_DCID_LEN = 5,    /* flags, version (4), DCID length */
	SHORT_DCID = 1,       /* flags */
};

/* steer_gen reads the generation from the connection ID at off; -1 when it is not one of ours. */
static __always_inline long steer_gen(struct sk_reuseport_md *md, __u32 off)
{
	__u8 cid[STEER_CID_LEN];
	if (bpf_skb_load_bytes(md, off, cid, sizeof(cid)) < 0)
		return -1;
	if (cid[STEER_CID_TAG] != STEER_TAG0 || cid[STEER_CID_TAG + 1] != STEER_TAG1)
		return -1;
	return cid[STEER_CID_GEN];
}

SEC("sk_reuseport")
int steer_quic(struct sk_reuseport_md *md)
{
	__u8 hdr[LONG_DCID_LEN + 1];
	long gen = -1;
	if (bpf_skb_load_bytes(md, UDP_HDR, hdr, 1) < 0)
		return SK_PASS;
	if (hdr[0] & QUIC_LONG) {
		if (bpf_skb_load_bytes(md, UDP_HDR, hdr, sizeof(hdr)) == 0 && hdr[LONG_DCID_LEN] == STEER_CID_LEN)
			gen = steer_gen(md, UDP_HDR + LONG_DCID_LEN + 1);
	} else {
		gen = steer_gen(md, UDP_HDR + SHORT_DCID);
	}
	if (gen >= 0) {
		__u32 key = gen;
		if (bpf_sk_select_reuseport(md, &steer_socks, &key, 0) == 0)
			return SK_PASS;
	}
	__u32 zero = 0;
	__u32 *newest = bpf_map_lookup_elem(&steer_newest, &zero);
	if (newest) {
		__u32 key = *newest;
		bpf_sk_select_reuseport(md, &steer_socks, &key, 0);
	}
	return SK_PASS; /* no socket chosen: the kernel's hash picks one */
}
