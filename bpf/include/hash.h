/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hash.h: the flow hash that picks a Maglev slot. It is MurmurHash3 (x86_32) over the words of
 * the flow key with a fixed seed, so that every balancer node and the Go control plane
 * (maps/hash.go, used by `switchyard flow`) compute the same value. */
#pragma once
#include <linux/types.h>
#include "consts.h"
#include "structs.h"

static __always_inline __u32 rotl32(__u32 x, __u32 r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 mm3_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rotl32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 mm3_fmix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* flow_hash hashes a flow for the VIP's options: VIP_HASH_SRC_ONLY keeps only the source
 * address, VIP_NO_SRC_PORT leaves the source port out. */
static __always_inline __u32 flow_hash(const struct flow_key *f, __u32 vip_flags)
{
	__u32 h = FLOW_HASH_SEED;
	h = mm3_mix(h, f->src[0]);
	h = mm3_mix(h, f->src[1]);
	h = mm3_mix(h, f->src[2]);
	h = mm3_mix(h, f->src[3]);
	if (!(vip_flags & VIP_HASH_SRC_ONLY)) {
		h = mm3_mix(h, f->dst[0]);
		h = mm3_mix(h, f->dst[1]);
		h = mm3_mix(h, f->dst[2]);
		h = mm3_mix(h, f->dst[3]);
		__u32 sport = (vip_flags & VIP_NO_SRC_PORT) ? 0 : f->sport;
		h = mm3_mix(h, (sport << 16) | f->dport);
		h = mm3_mix(h, f->proto);
	}
	return mm3_fmix(h ^ 40);
}

/* flow_entropy is a cheap per-flow value for the outer source address and IPv6 flow label, so
 * that receive-side scaling on the backend spreads flows over its queues (as Katran does). */
static __always_inline __u32 flow_entropy(const struct flow_key *f)
{
	__u32 x = f->src[0] ^ f->src[3] ^ ((__u32)f->sport << 16) ^ f->sport;
	return mm3_fmix(x);
}

/* vip_slot_xor is the vip_filter slot of a destination address whose four words (an IPv4
 * address: the address and three zeros) XOR to x (maps/hash.go mirrors it). */
static __always_inline __u32 vip_slot_xor(__u32 x)
{
	return mm3_fmix(x ^ FLOW_HASH_SEED) & (VIP_FILTER_SLOTS - 1);
}
