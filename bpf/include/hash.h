/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hash.h: the flow hash that picks a Maglev slot. It is MurmurHash3 (x86_32) over the words of
 * the flow key that carry the flow (an IPv4 flow's one address word each) with a fixed seed, so that every balancer node and the Go control plane
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

/* flow_hash_words is flow_hash over n address words of each address (1 for IPv4, 4 for IPv6),
 * with len the bytes a flow's hash covers (16 and 40). */
static __always_inline __u32 flow_hash_words(const struct flow_key *f, __u32 vip_flags, int n, __u32 len)
{
	__u32 h = FLOW_HASH_SEED;
	for (int i = 0; i < n; i++)
		h = mm3_mix(h, f->src[i]);
	if (!(vip_flags & VIP_HASH_SRC_ONLY)) {
		for (int i = 0; i < n; i++)
			h = mm3_mix(h, f->dst[i]);
		__u32 sport = (vip_flags & VIP_NO_SRC_PORT) ? 0 : f->sport;
		h = mm3_mix(h, (sport << 16) | f->dport);
		h = mm3_mix(h, f->proto);
	}
	return mm3_fmix(h ^ len);
}

/* flow_hash hashes a flow for the VIP's options: VIP_HASH_SRC_ONLY keeps only the source
 * address, VIP_NO_SRC_PORT leaves the source port out. An IPv4 flow hashes its one address word
 * each (four rounds; its key's other address words are zero, structs.h), an IPv6 flow all four
 * (ten rounds). The rounds are a serial chain, each paying its full latency; the value is pinned
 * by maps.TestFlowHashValues (docs/xdp.md, "Flow hash across versions"). */
static __always_inline __u32 flow_hash(const struct flow_key *f, __u32 vip_flags)
{
	if (f->family == FAMILY_V4)
		return flow_hash_words(f, vip_flags, 1, 16);
	return flow_hash_words(f, vip_flags, 4, 40);
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
