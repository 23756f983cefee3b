/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* quic.h: QUIC routing by connection ID (docs/xdp.md, "QUIC by connection ID"). A VIP that opts
 * in (VIP_QUIC_KATRAN or VIP_QUIC_LB in its flags) has the server ID read from the destination
 * connection ID of each UDP packet that missed the connection table; a server ID that names a
 * backend in "quic_servers" sends the packet there, whatever its addresses and ports, so that a
 * migrated client keeps its server and a ring change moves no connection. Anything else (a
 * client-chosen Initial CID, an unknown ID, a header too short to hold one) takes the Maglev path.
 *
 * Two encodings of the server ID:
 *   Katran: the first two bits of the CID are its version; v1 carries a 16-bit ID in bits 2..17,
 *           v2 a 24-bit ID in bytes 1..3, v3 a 32-bit ID in bytes 1..4 (v0: none).
 *   QUIC-LB (draft-ietf-quic-load-balancers, plaintext): the top three bits of the first byte are
 *           the config rotation bits, which must be the VIP's; the server ID is the next
 *           server_id_len bytes (1..4 here), big-endian. Rotation 0b111 (unroutable) never
 *           matches. */
#pragma once
#include <linux/bpf.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"
#include "parse.h"
#include "maps.h"

/* The QUIC fields of struct vip_meta.flags beside enum vip_flags' bits: the scheme is one flag
 * bit, the QUIC-LB server ID length and config rotation are small fields. */
enum quic_vip_bits {
	VIP_QUIC_KATRAN = 1U << 2,  /* route by a Katran-scheme server ID */
	VIP_QUIC_LB = 1U << 3,      /* route by a QUIC-LB plaintext server ID */
	VIP_QUIC_SID_LEN_SHIFT = 8, /* QUIC-LB server ID length in bytes (1..4), 4 bits */
	VIP_QUIC_SID_LEN_MASK = 0xF,
	VIP_QUIC_CR_SHIFT = 12,     /* QUIC-LB config rotation bits (0..6), 3 bits */
	VIP_QUIC_CR_MASK = 0x7,
	QUIC_LB_SID_MAX = 4,        /* longest QUIC-LB server ID read (a __u32 key) */
	QUIC_KATRAN_CID_MIN = 8,    /* CID bytes Katran requires (QUIC_MIN_CONNID_LEN) */
};

_Static_assert(((VIP_HASH_SRC_ONLY | VIP_NO_SRC_PORT) &
		(VIP_QUIC_KATRAN | VIP_QUIC_LB | (VIP_QUIC_SID_LEN_MASK << VIP_QUIC_SID_LEN_SHIFT) |
		 (VIP_QUIC_CR_MASK << VIP_QUIC_CR_SHIFT))) == 0,
	       "the QUIC bits of struct vip_meta.flags overlap enum vip_flags");

/* QUIC routing counters (per-CPU array "quic_counters": a map of its own, so that "counters"
 * keeps its layout). maps.QUICCounterNames names them. */
enum quic_counter_index {
	QUIC_CNT_ROUTED = 0, /* sent to the backend its CID's server ID names */
	QUIC_CNT_INITIAL,    /* long-header Initial or 0-RTT without a known server ID: Maglev */
	QUIC_CNT_UNKNOWN,    /* the CID carries a server ID no backend has: Maglev */
	QUIC_CNT_NO_ID,      /* no server ID to read (short or malformed header, CID too short,
			      * Katran version 0, other config rotation bits): Maglev */
	QUIC_CNT_MAX,
};

/* QUIC v2 (RFC 9369) numbers its long-header types differently from v1. */
#define QUIC_V2 0x6b3343cfU

/* Server ID -> backend id, for every backend of a QUIC VIP (drained ones included). One ID space
 * for all VIPs: a backend is one address, and its server ID is the same in every VIP. The loader
 * sizes it to max_backends. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, __u32);
} quic_servers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QUIC_CNT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} quic_counters SEC(".maps");

static __always_inline void quic_count(__u32 idx, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&quic_counters, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* quic_katran_id decodes a Katran-scheme server ID from 8 readable CID bytes; 0 = none. */
static __always_inline __u32 quic_katran_id(const __u8 *c)
{
	switch (c[0] >> 6) {
	case 1:
		return ((__u32)(c[0] & 0x3F) << 10) | ((__u32)c[1] << 2) | (c[2] >> 6);
	case 2:
		return ((__u32)c[1] << 16) | ((__u32)c[2] << 8) | c[3];
	case 3:
		return ((__u32)c[1] << 24) | ((__u32)c[2] << 16) | ((__u32)c[3] << 8) | c[4];
	}
	return 0;
}

/* quic_lb_id decodes a QUIC-LB plaintext server ID of len (1..4) bytes; -1 when the bytes are
 * not in the frame or the config rotation bits are not cr. */
static __always_inline long quic_lb_id(const __u8 *c, void *data_end, __u32 len, __u32 cr)
{
	if ((void *)(c + 2) > data_end || (c[0] >> 5) != cr)
		return -1;
	__u32 id = c[1];
	if (len > 1) {
		if ((void *)(c + 3) > data_end)
			return -1;
		id = id << 8 | c[2];
	}
	if (len > 2) {
		if ((void *)(c + 4) > data_end)
			return -1;
		id = id << 8 | c[3];
	}
	if (len > 3) {
		if ((void *)(c + 5) > data_end)
			return -1;
		id = id << 8 | c[4];
	}
	return id;
}

/* quic_server_id reads the server ID of a QUIC packet toward a VIP with flags: the ID, or -1 when
 * there is none to read. *initial says the packet is a long-header Initial or 0-RTT, whose CID
 * the client chose (so an ID that names no backend is no error). Only bytes inside both the frame
 * and the UDP payload are read; the UDP length was checked against the IP payload. */
static __always_inline long quic_server_id(void *data, void *data_end, const struct packet *p, __u32 flags,
					   int *initial)
{
	*initial = 0;
	__u32 off = p->l4_off;
	if (off > MAX_L4_OFF)
		return -1;
	struct udphdr *uh = data + off;
	__u8 *q = (__u8 *)(uh + 1);
	if ((void *)(q + 1) > data_end)
		return -1;
	__u32 plen = bpf_ntohs(uh->len);
	plen = plen > sizeof(*uh) ? plen - sizeof(*uh) : 0;
	int katran = flags & VIP_QUIC_KATRAN;
	__u32 len = (flags >> VIP_QUIC_SID_LEN_SHIFT) & VIP_QUIC_SID_LEN_MASK;
	if (!katran && (len == 0 || len > QUIC_LB_SID_MAX))
		return -1;
	__u32 need = katran ? QUIC_KATRAN_CID_MIN : 1 + len;
	__u8 *cid = q + 1;
	__u32 cid_off = 1;
	if (q[0] & 0x80) { /* long header: flags, version, DCID length, DCID */
		if ((void *)(q + 6) > data_end || plen < 6)
			return -1;
		__u32 ver = ((__u32)q[1] << 24) | ((__u32)q[2] << 16) | ((__u32)q[3] << 8) | q[4];
		__u8 type = (q[0] >> 4) & 3;
		*initial = ver == QUIC_V2 ? (type == 1 || type == 2) : type < 2;
		if (q[5] < need)
			return -1;
		cid = q + 6;
		cid_off = 6;
	}
	if (cid_off + need > plen)
		return -1;
	if (!katran)
		return quic_lb_id(cid, data_end, len, (flags >> VIP_QUIC_CR_SHIFT) & VIP_QUIC_CR_MASK);
	if ((void *)(cid + QUIC_KATRAN_CID_MIN) > data_end)
		return -1;
	__u32 id = quic_katran_id(cid);
	return id ? (long)id : -1;
}
