/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* maps.h: the forwarder's maps. Sizes here are defaults; the loader resizes vips, vip_stats,
 * vip_addrs, vip_gens, rings16, prev_rings16, backends, backend_stats and conntrack from its
 * options before loading, and the guard's (guard.h) and the unconfirmed tables as well. */
#pragma once
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"

/* The loader's defaults (loader.Options) are these, generated into Go by bpf2go. */
enum lb_defaults {
	DEFAULT_MAX_VIPS = 64,
	DEFAULT_MAX_BACKENDS = 4096,
	DEFAULT_RING_SIZE = 65537,
	DEFAULT_CONNTRACK = 262144,
};

/* {address, port, protocol} -> VIP; port 0 = any port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, struct vip_key);
	__type(value, struct vip_meta);
} vips SEC(".maps");

/* The version of vips: the control plane adds one after every change of vips (maps.Set), the
 * loader at every load. A vip_cache slot holds for the version it was copied at only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} vips_version SEC(".maps");

/* Each CPU's cache of vips entries (lb.c, vip_lookup): an array read and a key compare instead
 * of a hash lookup for the VIP of a new flow. Per CPU, so only this CPU's program writes a slot,
 * and never while another reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VIP_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct vip_cache_entry);
} vip_cache SEC(".maps");

/* Every address that carries at least one VIP (port 0, proto 0): decides whether a fragment, an
 * IPv4 packet with options or an ICMP message is "toward a VIP". Value: number of VIPs on it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, struct vip_key);
	__type(value, __u32);
} vip_addrs SEC(".maps");

/* VIP id -> generation; see struct flow_state. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, __u32);
} vip_gens SEC(".maps");

/* A one-bit-per-slot filter of VIP addresses, indexed by vip_slot_xor(): a zero slot proves the
 * address carries no VIP, so traffic for the host costs no hash lookup at all. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE); /* the control plane rewrites it through its memory map */
	__uint(max_entries, VIP_FILTER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} vip_filter SEC(".maps");

/* Backend id -> backend. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct backend);
} backends SEC(".maps");

/* A ring word: RING_WORD_SLOTS consecutive ring slots, each a 16-bit backend id (0 = none).
 * The kernel rounds every array value up to 8 bytes, so one __u32 slot per value cost 8 bytes a
 * slot; four 16-bit slots per value cost 2. Memory-mapped, the map reads as one flat __u16 array. */
#define RING_WORD_SLOTS 4
struct ring_word {
	__u16 id[RING_WORD_SLOTS];
};

/* Maglev lookup tables: each VIP's ring at the slot range its vip_meta names (ring_off,
 * ring_size), allocated by the control plane; RING_WORD_SLOTS slots a value (the loader sizes it
 * to ring_slots, rounded up). Memory-mapped,
 * so that the control plane reads a whole ring with one copy and writes only the slots that
 * change, without a syscall per slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, (DEFAULT_MAX_VIPS * DEFAULT_RING_SIZE + RING_WORD_SLOTS - 1) / RING_WORD_SLOTS);
	__type(key, __u32);
	__type(value, struct ring_word);
} rings16 SEC(".maps");

/* The previous Maglev table of each VIP, laid out as "rings16": slot for slot, the backend the
 * table before the last change gave (0 = none). A non-SYN packet without a connection-table
 * entry whose previous pick differs from the current one carries it as its second candidate. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, (DEFAULT_MAX_VIPS * DEFAULT_RING_SIZE + RING_WORD_SLOTS - 1) / RING_WORD_SLOTS);
	__type(key, __u32);
	__type(value, struct ring_word);
} prev_rings16 SEC(".maps");

/* Connection tables: "conntrack4" for IPv4 flows (16-byte key), "conntrack" for IPv6 flows.
 * One LRU list per CPU (BPF_F_NO_COMMON_LRU): an insert takes a free entry
 * from its own CPU's list without the common list's lock, as Katran's one LRU per CPU does; the
 * hash table itself is shared, so a flow inserted on one CPU is found from every CPU. Each CPU's
 * list holds max_entries / CPUs entries (docs/xdp.md, "Maps and pins"). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, DEFAULT_CONNTRACK);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, DEFAULT_CONNTRACK);
	__type(key, struct flow_key4);
	__type(value, struct flow_state);
} conntrack4 SEC(".maps");

/* key4 is the IPv4 connection-table key of a flow, made as four words (little-endian, as the
 * target): the kernel hashes and compares it word by word, and a word load that spans several
 * narrow stores waits for them to retire. */
static __always_inline struct flow_key4 key4(const struct flow_key *f)
{
	union {
		struct flow_key4 k;
		__u32 w[4];
	} u;
	u.w[0] = f->src[0];
	u.w[1] = f->dst[0];
	u.w[2] = f->sport | (__u32)f->dport << 16;
	u.w[3] = f->proto;
	return u.k;
}

/* ct_lookup finds a flow's connection-table entry in its family's table. */
static __always_inline struct flow_state *ct_lookup(const struct flow_key *f)
{
	if (f->family == FAMILY_V4) {
		struct flow_key4 k = key4(f);
		return bpf_map_lookup_elem(&conntrack4, &k);
	}
	return bpf_map_lookup_elem(&conntrack, f);
}

/* ct_update writes a flow's connection-table entry in its family's table. */
static __always_inline void ct_update(const struct flow_key *f, const struct flow_state *st)
{
	if (f->family == FAMILY_V4) {
		struct flow_key4 k = key4(f);
		bpf_map_update_elem(&conntrack4, &k, st, BPF_ANY);
		return;
	}
	bpf_map_update_elem(&conntrack, f, st, BPF_ANY);
}

/* Unconfirmed flows: a SYN's entry is made here, not in the connection table, and moves there on
 * the flow's first non-SYN packet (ct_promote). A flood of SYNs from random sources churns these
 * tables only, so it never evicts an established flow (docs/xdp.md, "The guard"). The loader
 * sizes them (a quarter of the connection tables by default). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, DEFAULT_CONNTRACK / 4);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} conntrack_syn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, DEFAULT_CONNTRACK / 4);
	__type(key, struct flow_key4);
	__type(value, struct flow_state);
} conntrack_syn4 SEC(".maps");

/* ct_syn_lookup finds a flow's unconfirmed entry. */
static __always_inline struct flow_state *ct_syn_lookup(const struct flow_key *f)
{
	if (f->family == FAMILY_V4) {
		struct flow_key4 k = key4(f);
		return bpf_map_lookup_elem(&conntrack_syn4, &k);
	}
	return bpf_map_lookup_elem(&conntrack_syn, f);
}

/* ct_syn_update writes a flow's unconfirmed entry. */
static __always_inline void ct_syn_update(const struct flow_key *f, const struct flow_state *st)
{
	if (f->family == FAMILY_V4) {
		struct flow_key4 k = key4(f);
		bpf_map_update_elem(&conntrack_syn4, &k, st, BPF_ANY);
		return;
	}
	bpf_map_update_elem(&conntrack_syn, f, st, BPF_ANY);
}

/* ct_promote moves a flow's unconfirmed entry into the connection table and returns it there;
 * NULL when the flow has no unconfirmed entry. */
static __always_inline struct flow_state *ct_promote(const struct flow_key *f)
{
	struct flow_state *u = ct_syn_lookup(f);
	if (!u)
		return NULL;
	struct flow_state st = *u;
	ct_update(f, &st);
	struct flow_state *c = ct_lookup(f);
	if (!c)
		return u; /* not written: follow the unconfirmed entry, promoted on the next packet */
	if (f->family == FAMILY_V4) {
		struct flow_key4 k = key4(f);
		bpf_map_delete_elem(&conntrack_syn4, &k);
	} else {
		bpf_map_delete_elem(&conntrack_syn, f);
	}
	return c;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_percpu);
} counters SEC(".maps");

_Static_assert(CNT_MAX == sizeof(((struct lb_percpu *)0)->cnt) / sizeof(struct counter),
	       "struct lb_percpu holds every counter of enum counter_index");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SC_CNT_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} sc_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct counter);
} vip_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct counter);
} backend_stats SEC(".maps");

/* Per VIP id: packets and bytes toward the VIP that were dropped (any reason; the reasons are
 * counted globally in "counters"). A map of its own, so that "vip_stats" keeps its shape. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEFAULT_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct counter);
} vip_drops SEC(".maps");

/* percpu is this CPU's counters and clock (NULL never happens: a one-entry array). */
static __always_inline struct lb_percpu *percpu(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

/* count_pc counts a packet (and bytes) under idx in pc; the fast paths look pc up once. */
static __always_inline void count_pc(struct lb_percpu *pc, __u32 idx, __u64 bytes)
{
	if (pc && idx < CNT_MAX) {
		pc->cnt[idx].packets++;
		pc->cnt[idx].bytes += bytes;
	}
}

static __always_inline void count(__u32 idx, __u64 bytes)
{
	count_pc(percpu(), idx, bytes);
}

/* now_pc is the coarse monotonic clock (CLOCK_MONOTONIC_COARSE, a tick's resolution: enough for
 * idle timeouts). It is read once a jiffy per CPU and kept in pc: bpf_jiffies64() is inlined by
 * the verifier (one load), the clock is a helper call. */
static __always_inline __u64 now_pc(struct lb_percpu *pc)
{
	__u64 j = bpf_jiffies64();
	if (!pc)
		return bpf_ktime_get_coarse_ns();
	if (pc->clock_jiffies != j || pc->clock_ns == 0) {
		pc->clock_jiffies = j;
		pc->clock_ns = bpf_ktime_get_coarse_ns();
	}
	return pc->clock_ns;
}

static __always_inline void sc_count(__u32 idx)
{
	struct counter *c = bpf_map_lookup_elem(&sc_counters, &idx);
	if (c)
		c->packets++;
}

static __always_inline void count_in(void *map, __u32 idx, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(map, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

/* drop counts a drop under its reason and the DROP total. */
static __always_inline int drop(__u32 reason, __u64 bytes)
{
	count(reason, bytes);
	count(CNT_DROP, bytes);
	return XDP_DROP;
}

/* drop_vip is drop for a packet toward a known VIP: counted in the VIP's drops as well. */
static __always_inline int drop_vip(__u32 reason, __u32 vip_id, __u64 bytes)
{
	count_in(&vip_drops, vip_id, bytes);
	return drop(reason, bytes);
}
