/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* consts.h: constants shared by the switchyard XDP programs. Values that Go must know are enums,
 * not macros: BTF carries enums, and bpf2go -type turns them into Go constants (lb_bpfel.go and
 * decap_bpfel.go in loader/third_party/bpfobj), so the two sides agree by construction. An enum
 * reaches BTF only if a type in the object refers to it: lb.c and decap.c list theirs in a
 * struct go_types (section ".go_types", which nothing loads). loader/consts_test.go and
 * maps/consts_test.go check the Go names and defaults against the compiled objects. */
#pragma once

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define IPPROTO_ICMP_ 1
#define IPPROTO_IPIP_ 4
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_IPV6_ 41
#define IPPROTO_FRAGMENT_ 44
#define IPPROTO_DSTOPTS_ 60
#define IPPROTO_ICMPV6_ 58

/* Address family of struct flow_key, vip_key, backend, decap_key and sc_prefix_key. */
enum family {
	FAMILY_V4 = 4,
	FAMILY_V6 = 6,
};

/* Encapsulation overheads (outer IP header only: the Ethernet header is rewritten in place). */
#define IPV4_HDR_LEN 20
#define IPV6_HDR_LEN 40

/* Outer header TTL / hop limit. */
#define OUTER_TTL 64

/* IPv4 "don't fragment" and fragment bits. */
#define IP_DF 0x4000
#define IP_MF 0x2000
#define IP_OFFMASK 0x1FFF

/* ICMP types used. */
#define ICMP_ECHOREPLY_ 0
#define ICMP_DEST_UNREACH_ 3
#define ICMP_FRAG_NEEDED_ 4
#define ICMP_ECHO_ 8
#define ICMPV6_PKT_TOOBIG_ 2
#define ICMPV6_ECHO_REQUEST_ 128
#define ICMPV6_ECHO_REPLY_ 129

/* How many bytes of the offending packet an ICMP too-big answer quotes: enough for the
 * IP header and the transport ports, which is what the client kernel needs to find its socket. */
#define ICMP_QUOTE_LEN 64

/* TCP flags (byte 13 of the TCP header). */
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

/* VIP flags (struct vip_meta.flags). Bits 2, 3 and 8..14 are QUIC's (enum quic_vip_bits,
 * include/quic.h, which asserts that they do not overlap these). */
enum vip_flags {
	VIP_HASH_SRC_ONLY = 1U << 0, /* hash the source address only */
	VIP_NO_SRC_PORT = 1U << 1,   /* leave the source port out of the hash */
};

/* Connection-table entry flags (struct flow_state.flags). */
enum flow_flags {
	FLOW_CLOSING = 1U << 0, /* FIN or RST seen from the client */
};

/* Config flags (struct lb_config.flags). */
enum cfg_flags {
	CFG_ICMP_TOOBIG = 1U << 0,   /* answer over-MTU frames with ICMP frag-needed / PTB */
	CFG_SECOND_CHANCE = 1U << 1, /* carry the previous ring's pick with non-SYN misses */
};

/* Second chance (docs/xdp.md, "Second chance"): the outer header of a packet whose flow may be
 * held by another backend carries that backend's address in an experimental option (RFC 4727
 * type 0x1E, for IPv4 options and IPv6 destination options alike), tagged with SC_MAGIC so that
 * another experiment's use of the same type is not mistaken for it.
 *   IPv4: option [0x1E][8][magic:2][address:4] after the 20-byte header (IHL 7).
 *   IPv6: destination-options header [next][2][0x1E][20][magic:2][0:2][address:16] (24 bytes)
 *         between the outer header and the inner packet. */
#define SC_OPT_TYPE 0x1E
#define SC_MAGIC 0x5343 /* "SC" */
#define SC_OPT4_LEN 8
#define SC_DSTOPT_LEN 24
#define SC_OPT6_LEN 20

/* last_seen is refreshed at most this often for TCP, to keep the fast path read-mostly. */
#define TCP_REFRESH_NS 1000000000ULL

/* Slots of each CPU's VIP cache (vip_cache; a power of two no larger than 2^16). */
#define VIP_CACHE_SLOTS 1024
#define VIP_CACHE_BITS 10

/* Slots of the VIP-address filter (must be a power of two). */
enum vip_filter_size {
	VIP_FILTER_SLOTS = 4096,
};

/* Hash seed: fixed so that every balancer node computes the same hash (see maps/hash.go). */
enum flow_hash {
	FLOW_HASH_SEED = 0x5397a1ed,
};

/* Global counter indexes (per-CPU array "counters"). maps.CounterNames names them. */
enum counter_index {
	CNT_TX = 0,          /* encapsulated and sent to a backend */
	CNT_PASS,            /* not for a VIP: passed untouched to the stack */
	CNT_DROP,            /* dropped (sum of every drop reason) */
	CNT_CT_HIT,          /* established flow found in the connection table */
	CNT_CT_MISS_SYN,     /* new flow: TCP SYN, chosen by Maglev */
	CNT_CT_MISS_NONSYN,  /* no entry for a non-SYN packet (UDP or mid-stream TCP): Maglev */
	CNT_ICMP_FWD,        /* ICMP frag-needed / packet-too-big forwarded to the flow's backend */
	CNT_ICMP_ECHO,       /* echo request to a VIP answered in XDP */
	CNT_ICMP_TOOBIG_TX,  /* frag-needed / packet-too-big sent to a client */
	CNT_DROP_IP_OPTS,    /* IPv4 with options toward a VIP */
	CNT_DROP_FRAG,       /* IPv4 fragment or IPv6 fragment header toward a VIP */
	CNT_DROP_MTU,        /* frame would exceed the MTU after encapsulation */
	CNT_DROP_NO_BACKEND, /* VIP has no usable backend */
	CNT_DROP_MALFORMED,  /* truncated or inconsistent headers toward a VIP */
	CNT_DROP_UNSUPPORTED,/* protocol toward a VIP that switchyard does not balance */
	CNT_DROP_ENCAP,      /* could not grow or write the frame */
	CNT_CT_INSERT_SKIPPED, /* a new flow's SYN not recorded: over syn_insert_limit (forwarded) */
	CNT_MAX,
};

/* Decap counters (per-CPU array "decap_counters"). */
enum decap_counter_index {
	DCNT_DECAP_V4 = 0, /* IPIP stripped */
	DCNT_DECAP_6IN6,   /* IP6IP6 stripped */
	DCNT_DECAP_4IN6,   /* IPv4-in-IPv6 stripped */
	DCNT_PASS,         /* anything else, passed untouched */
	DCNT_DROP,         /* tunnel packet for us that could not be stripped */
	DCNT_MAX,
};

/* Second-chance counters of the forwarder (per-CPU array "sc_counters"; a map of its own, so
 * that the pinned "counters" map keeps its size and layout v1 stays valid). */
enum sc_counter_index {
	SC_CNT_SENT = 0,   /* packet sent with a second candidate */
	SC_CNT_FLOWS,      /* non-SYN miss whose previous-ring pick differs: candidate recorded */
	SC_CNT_TOO_BIG,    /* sent without its candidate: the option would exceed the MTU */
	SC_CNT_MAX,
};

/* Second-chance counters of the decapsulator (per-CPU array "decap_sc_counters"). */
enum decap_sc_counter_index {
	DSC_OWNED = 0,     /* carried a candidate; this host owns the flow: decapsulated here */
	DSC_FORWARDED,     /* carried a candidate; not ours: re-encapsulated toward the candidate */
	DSC_NO_CANDIDATE,  /* not ours, but the candidate is this host or unusable: decapsulated here */
	DSC_SKIPPED,       /* carried a candidate but is not a mid-stream TCP packet: decapsulated here */
	DSC_MALFORMED,     /* tunnel options for this host that are not a well-formed candidate: dropped */
	DSC_MAX,
};

/* Second-chance packets the decapsulator would have forwarded but refused, by reason (per-CPU
 * array "decap_sc_refused": a map of its own, so that "decap_sc_counters" keeps its size and the
 * pins made by an older binary stay valid). Refused packets are decapsulated here. */
enum decap_sc_refused_index {
	DSCR_SOURCE = 0,   /* outer source not in "decap_sc_sources" (not an allowed balancer) */
	DSCR_CANDIDATE,    /* candidate not in "decap_sc_peers" */
	DSCR_MAX,
};

/* The allow-lists of second chance (LPM tries "decap_sc_peers", "decap_sc_sources"): at most
 * this many prefixes each; a key matches on family (32 bits with its pad) then address. */
enum sc_prefix {
	SC_PREFIX_MAX = 256,
	SC_PREFIX_FULL = 32 + 128,
};
