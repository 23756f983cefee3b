/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* guard.h: the DDoS guard (docs/xdp.md, "The guard"). It runs on the miss path only, after the
 * connection table (a SYN never looks there) and the VIP lookup and before Maglev, so an
 * established flow never meets it and a VIP whose guard is off ("guard_vips" entry zero) costs one
 * array lookup per new flow. An IPv4 SYN meets it before the parse (syn4 in lb.c).
 * In order: an allow match (the VIP's list, then the global one) exempts the source from every
 * rule; a deny match drops; then a new connection (a TCP SYN, a UDP packet without an entry) is
 * dropped when the VIP's bucket is empty, else when its source prefix's bucket is, and otherwise
 * takes a token from each. A mid-stream TCP packet without an entry (a flow moved by ECMP, a restart) is never rate
 * limited: after a failover every moved flow arrives at once.
 *
 * The guard's state is bounded: rules in LPM tries of GUARD_RULES_MAX entries, source buckets in
 * an LRU hash ("guard_src", sized by the loader), whose inserts are counted so the control plane
 * reports evictions. Buckets are not atomic across CPUs: two CPUs taking a token from one bucket
 * at once may both succeed, so a limit holds within a token per CPU. */
#pragma once
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"

/* Guard flags (struct guard_vip.flags): which stages a VIP runs. Zero: the guard is off. */
enum guard_flags {
	GUARD_ALLOW = 1U << 0,        /* the VIP's own allow list has entries */
	GUARD_DENY = 1U << 1,         /* the VIP's own deny list has entries */
	GUARD_GLOBAL_ALLOW = 1U << 2, /* the global allow list has entries */
	GUARD_GLOBAL_DENY = 1U << 3,  /* the global deny list has entries */
	GUARD_SRC_LIMIT = 1U << 4,    /* per-source new-connection buckets */
	GUARD_VIP_LIMIT = 1U << 5,    /* the VIP's new-connection bucket */
};

/* Sizes: rules a trie holds (allow and deny each), the scope of global rules (beyond any VIP id)
 * and the default number of source buckets. */
enum guard_sizes {
	GUARD_RULES_MAX = 4096,
	GUARD_SCOPE_GLOBAL = 0xffff,
	GUARD_SRC_DEFAULT = 65536,
	GUARD_PREFIX_FULL = 32 + 128,
};

/* Guard counters (per-CPU array "guard_counters"; maps.GuardCounterNames names them). */
enum guard_counter_index {
	GUARD_CNT_DENY = 0,      /* dropped: the source matches a deny rule */
	GUARD_CNT_SRC_RATE,      /* dropped: the source prefix's bucket is empty */
	GUARD_CNT_VIP_RATE,      /* dropped: the VIP's bucket is empty */
	GUARD_CNT_ALLOWED,       /* exempted by an allow rule */
	GUARD_CNT_SRC_NEW,       /* source buckets made (inserts into guard_src) */
	GUARD_CNT_FOREIGN_MAC,   /* toward a VIP but not to this balancer's MAC: passed */
	GUARD_CNT_UNCONFIRMED,   /* unconfirmed entries promoted to the connection table */
	GUARD_CNT_MAX,
};

/* A VIP's guard, written by the control plane (array "guard_vips", by VIP id). Rates are kept as
 * the time a token takes to come (cost) and the time a full bucket holds (cap = burst x cost). */
struct guard_vip {
	__u32 flags;       /* GUARD_* */
	__u8 src_plen4;    /* prefix length of an IPv4 source bucket (1..32) */
	__u8 src_plen6;    /* prefix length of an IPv6 source bucket (1..128) */
	__u16 pad;
	__u64 src_cost_ns; /* 1e9 / per-source rate */
	__u64 src_cap_ns;  /* per-source burst x src_cost_ns */
	__u64 vip_cost_ns; /* 1e9 / per-VIP rate */
	__u64 vip_cap_ns;  /* per-VIP burst x vip_cost_ns */
};

/* A token bucket's state, written by the program: credit in ns of tokens, and when it was last
 * refilled. */
struct guard_bucket {
	__u64 credit_ns;
	__u64 last_ns;
};

/* An allow or deny rule (LPM trie key). prefixlen counts the 32 bits of scope, family and pad
 * first, then the address bits, so a rule of one VIP (scope = VIP id) or of every VIP (scope
 * GUARD_SCOPE_GLOBAL) never matches another scope, nor an address of the other family. */
struct guard_prefix_key {
	__u32 prefixlen;
	__u16 scope;
	__u8 family;
	__u8 pad;
	__u32 addr[4];
};

/* A source bucket's key: the source address masked to the VIP's prefix length. */
struct guard_src_key {
	__u32 addr[4];
	__u16 vip_id;
	__u8 family;
	__u8 plen;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct guard_vip);
} guard_vips SEC(".maps");

/* Each VIP's new-connection bucket (by VIP id); a map apart from guard_vips so that a rewrite of
 * the rules leaves the buckets as they are. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct guard_bucket);
} guard_vip_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, GUARD_RULES_MAX);
	__type(key, struct guard_prefix_key);
	__type(value, __u32);
} guard_allow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, GUARD_RULES_MAX);
	__type(key, struct guard_prefix_key);
	__type(value, __u32);
} guard_deny SEC(".maps");

/* Source buckets: bounded, the least recently used evicted first (one LRU list per CPU, as the
 * connection tables). A random-source flood churns this map, never the connection table. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, GUARD_SRC_DEFAULT);
	__type(key, struct guard_src_key);
	__type(value, struct guard_bucket);
} guard_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GUARD_CNT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} guard_counters SEC(".maps");

static __always_inline void guard_count(__u32 idx, __u64 bytes)
{
	count_in(&guard_counters, idx, bytes);
}

/* guard_match looks a source up in one trie, under one scope. */
static __always_inline int guard_match(void *trie, const struct flow_key *f, __u16 scope)
{
	struct guard_prefix_key k = {};
	k.prefixlen = f->family == FAMILY_V4 ? 32 + 32 : GUARD_PREFIX_FULL;
	k.scope = scope;
	k.family = f->family;
	__builtin_memcpy(k.addr, f->src, 16);
	return bpf_map_lookup_elem(trie, &k) != NULL;
}

/* guard_listed reports whether the source matches the VIP's list or the global one in trie, each
 * looked up only when its flag says it has entries. */
static __always_inline int guard_listed(void *trie, const struct flow_key *f, __u16 vip_id, __u32 flags,
					__u32 own, __u32 global)
{
	if ((flags & own) && guard_match(trie, f, vip_id))
		return 1;
	return (flags & global) && guard_match(trie, f, GUARD_SCOPE_GLOBAL);
}

/* guard_refill is a bucket's credit refilled for the time since its last refill, at most cap
 * (its last refill moved to now; the credit itself is left to the caller to store). */
static __always_inline __u64 guard_refill(struct guard_bucket *b, __u64 now, __u64 cap)
{
	__u64 credit = b->credit_ns;
	if (now > b->last_ns) {
		credit += now - b->last_ns;
		b->last_ns = now;
	}
	return credit > cap ? cap : credit;
}

/* guard_take refills a bucket and takes one token (cost) from it: 1 when it had one, 0 when it
 * is empty. */
static __always_inline int guard_take(struct guard_bucket *b, __u64 now, __u64 cost, __u64 cap)
{
	__u64 credit = guard_refill(b, now, cap);
	if (credit < cost) {
		b->credit_ns = credit;
		return 0;
	}
	b->credit_ns = credit - cost;
	return 1;
}

/* guard_mask is an address word kept to the bits of a prefix that fall in word i. */
static __always_inline __u32 guard_mask(__u32 w, __u32 plen, __u32 i)
{
	__u32 first = i * 32;
	if (plen <= first)
		return 0;
	if (plen >= first + 32)
		return w;
	return w & bpf_htonl(~0U << (32 - (plen - first)));
}

/* guard_src_take takes a token from the bucket of the flow's source prefix, making the bucket
 * (full, less this token) on the prefix's first new connection. */
static __always_inline int guard_src_take(const struct guard_vip *g, const struct flow_key *f, __u16 vip_id, __u64 now)
{
	struct guard_src_key k = {};
	__u32 plen = f->family == FAMILY_V4 ? g->src_plen4 : g->src_plen6;
	k.addr[0] = guard_mask(f->src[0], plen, 0);
	if (f->family != FAMILY_V4) {
		k.addr[1] = guard_mask(f->src[1], plen, 1);
		k.addr[2] = guard_mask(f->src[2], plen, 2);
		k.addr[3] = guard_mask(f->src[3], plen, 3);
	}
	k.vip_id = vip_id;
	k.family = f->family;
	k.plen = plen;
	struct guard_bucket *b = bpf_map_lookup_elem(&guard_src, &k);
	if (b)
		return guard_take(b, now, g->src_cost_ns, g->src_cap_ns);
	struct guard_bucket nb = {.last_ns = now};
	if (g->src_cap_ns > g->src_cost_ns)
		nb.credit_ns = g->src_cap_ns - g->src_cost_ns;
	bpf_map_update_elem(&guard_src, &k, &nb, BPF_NOEXIST);
	guard_count(GUARD_CNT_SRC_NEW, 0);
	return 1;
}

/* guard_check runs the VIP's guard on a packet that missed the connection table. It returns the
 * guard counter of the drop (GUARD_CNT_DENY, _SRC_RATE, _VIP_RATE), or -1 to let it through.
 * new_conn says whether the packet opens a connection (rate limits apply to those only).
 * The VIP's bucket is looked at before the source's: under a flood that has emptied it, a packet
 * from a new source is dropped by an array read instead of making a source bucket (an LRU
 * insert, a few times the cost of the rest of the drop). Its token is taken only once the
 * source's bucket gave one, so a packet dropped by either rule takes no token from the other. */
static __always_inline int guard_check(const struct flow_key *f, __u32 vip_id, int new_conn, struct lb_percpu *pc, __u64 bytes)
{
	struct guard_vip *g = bpf_map_lookup_elem(&guard_vips, &vip_id);
	if (!g || !g->flags)
		return -1;
	__u32 flags = g->flags;
	if ((flags & (GUARD_ALLOW | GUARD_GLOBAL_ALLOW)) &&
	    guard_listed(&guard_allow, f, vip_id, flags, GUARD_ALLOW, GUARD_GLOBAL_ALLOW)) {
		guard_count(GUARD_CNT_ALLOWED, bytes);
		return -1;
	}
	if ((flags & (GUARD_DENY | GUARD_GLOBAL_DENY)) &&
	    guard_listed(&guard_deny, f, vip_id, flags, GUARD_DENY, GUARD_GLOBAL_DENY))
		return GUARD_CNT_DENY;
	if (!new_conn || !(flags & (GUARD_SRC_LIMIT | GUARD_VIP_LIMIT)))
		return -1;
	__u64 now = now_pc(pc);
	struct guard_bucket *vb = NULL;
	__u64 vcredit = 0;
	if (flags & GUARD_VIP_LIMIT) {
		vb = bpf_map_lookup_elem(&guard_vip_buckets, &vip_id);
		if (vb) {
			vcredit = guard_refill(vb, now, g->vip_cap_ns);
			if (vcredit < g->vip_cost_ns) {
				vb->credit_ns = vcredit;
				return GUARD_CNT_VIP_RATE;
			}
		}
	}
	if ((flags & GUARD_SRC_LIMIT) && !guard_src_take(g, f, vip_id, now)) {
		if (vb)
			vb->credit_ns = vcredit;
		return GUARD_CNT_SRC_RATE;
	}
	if (vb)
		vb->credit_ns = vcredit - g->vip_cost_ns;
	return -1;
}

/* guard_drop drops a packet the guard refused, counted under its reason, in the VIP's drops and
 * in the DROP total. */
static __always_inline int guard_drop(__u32 reason, __u32 vip_id, __u64 bytes)
{
	guard_count(reason, bytes);
	count_in(&vip_drops, vip_id, bytes);
	count(CNT_DROP, bytes);
	return XDP_DROP;
}

/* foreign_mac reports whether a frame's destination MAC is not the balancer's own (if_mac; an
 * unset if_mac, all zero, accepts every frame). On a shared segment a switch floods unicast
 * frames for a MAC it has not learnt to every port: each balancer there would encapsulate the
 * same frame, and the backend would get it twice. Such frames pass to the stack, which drops
 * them as not for this host. */
static __always_inline int foreign_mac(const void *data, const struct lb_config *cfg)
{
	__u32 own0 = *(const __u32 *)cfg->if_mac;
	__u16 own1 = *(const __u16 *)(cfg->if_mac + 4);
	if (!own0 && !own1)
		return 0;
	return *(const __u32 *)data != own0 || *(const __u16 *)(data + 4) != own1;
}
