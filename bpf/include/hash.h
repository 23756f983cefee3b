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

/* flow_hash_words is flow_hash over the address words given: constants where the caller knows
 * them, so that the compiler folds their rounds. */
static __always_inline __u32 flow_hash_words(const __u32 *src, const __u32 *dst, const struct flow_key *f,
					     __u32 vip_flags)
{
	__u32 h = FLOW_HASH_SEED;
	h = mm3_mix(h, src[0]);
	h = mm3_mix(h, src[1]);
	h = mm3_mix(h, src[2]);
	h = mm3_mix(h, src[3]);
	if (!(vip_flags & VIP_HASH_SRC_ONLY)) {
		h = mm3_mix(h, dst[0]);
		h = mm3_mix(h, dst[1]);
		h = mm3_mix(h, dst[2]);
		h = mm3_mix(h, dst[3]);
		__u32 sport = (vip_flags & VIP_NO_SRC_PORT) ? 0 : f->sport;
		h = mm3_mix(h, (sport << 16) | f->dport);
		h = mm3_mix(h, f->proto);
	}
	return mm3_fmix(h ^ 40);
}

/* flow_hash hashes a flow for the VIP's options: VIP_HASH_SRC_ONLY keeps only the source
 * address, VIP_NO_SRC_PORT leaves the source port out. An IPv4 flow's address words 1..3 are
 * zero (structs.h), so its six rounds over them are folded: the same value, fewer instructions. */
static __always_inline __u32 flow_hash(const struct flow_key *f, __u32 vip_flags)
{
	if (f->family == FAMILY_V4) {
		__u32 src[4] = {f->src[0], 0, 0, 0}, dst[4] = {f->dst[0], 0, 0, 0};
		return flow_hash_words(src, dst, f, vip_flags);
	}
	return flow_hash_words(f->src, f->dst, f, vip_flags);
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
