/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* structs.h: structs shared with Go. bpf2go generates their Go twins (loader/third_party/bpfobj/lb_bpfel.go);
 * loader/load_test.go checks that each map's key and value are the Go types the code uses. Addresses are in network byte order; an IPv4 address
 * sits in addr[0] with addr[1..3] zero. Ports are in network byte order. */
#pragma once
#include <linux/types.h>
#include "consts.h"

/* A connection-table key and the input of the flow hash. */
struct flow_key {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* The IPv4 connection table's key (16 bytes: hashed and compared in a third of the time of a
 * flow_key; IPv6 flows keep flow_key). pad is zero. */
struct flow_key4 {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* A connection-table value. vip_id and vip_gen let an established packet skip the VIP lookup:
 * the entry is valid while vip_gens[vip_id] still equals vip_gen (the control plane bumps it when
 * it removes or re-assigns the VIP). */
struct flow_state {
	__u32 backend;   /* backend id (index into "backends") */
	__u16 vip_id;
	__u16 vip_gen;
	__u64 last_seen; /* coarse monotonic ns of the last packet (refreshed at most once a second for TCP) */
	__u32 flags;     /* FLOW_* */
	__u32 backend2;  /* second-chance candidate (backend id) carried with every packet, 0 = none */
};

/* VIP lookup key: port 0 means any port. */
struct vip_key {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 family;
};

/* VIP value. Each VIP has a ring of its own size (a prime, from its backend count) at a slot
 * range of rings16 and prev_rings16 that the control plane allocates (layout v3). The vips map is
 * a hash, so a VIP whose ring moves (a new size) switches offset and size in one update. */
struct vip_meta {
	__u32 id;        /* index of the VIP's stats slot and generation */
	__u32 flags;     /* VIP_* */
	__u32 ring_off;  /* first slot of the VIP's ring in rings16 and prev_rings16 */
	__u32 ring_size; /* slots of the VIP's ring (a prime); 0 = no ring yet (no backend) */
};

/* A slot of a CPU's VIP cache (maps.h, vip_cache): a copy of a vips entry, valid while version
 * is the vips map's (vips_version). */
struct vip_cache_entry {
	struct vip_key key;
	struct vip_meta meta;
	__u32 version;
};

/* A backend (the "backends" array, indexed by backend id; id 0 is never used). */
struct backend {
	__u32 addr[4];
	__u8 family; /* 0 = slot empty */
	__u8 pad[3];
	__u32 flags;
};

/* The balancer's configuration (single-entry array "config"). */
struct lb_config {
	__u8 if_mac[6];      /* source MAC of encapsulated frames */
	__u8 nexthop_mac[6]; /* destination MAC of encapsulated frames */
	__u16 mtu;           /* largest L3 packet the egress link carries */
	__u16 pad;
	__u32 ring_size;     /* the default Maglev ring size; the program reads each VIP's own (vip_meta) */
	__u32 src4;          /* outer IPv4 source base (network order) */
	__u32 src4_mask;     /* host-order mask of the bits of src4 replaced by the flow hash */
	__u32 src6[4];       /* outer IPv6 source base; the last 32 bits are replaced by the flow hash */
	__u64 udp_timeout_ns;/* idle time after which a UDP flow re-hashes */
	__u32 flags;         /* CFG_* */
	__u32 syn_insert_limit; /* SYN inserts a second per CPU above which they are skipped; 0 = none */
};

/* Packet and byte counter. */
struct counter {
	__u64 packets;
	__u64 bytes;
};

/* The forwarder's global counters (enum counter_index) and its clock cache: the one entry of the
 * per-CPU array "counters", so that a packet looks it up once for every counter and the clock. */
struct lb_percpu {
	struct counter cnt[CNT_MAX]; /* by enum counter_index */
	__u64 clock_jiffies;     /* jiffies when clock_ns was read */
	__u64 clock_ns;          /* coarse monotonic ns read then */
	__u64 syn_window_ns;     /* start of this CPU's current second of SYN inserts */
	__u64 syn_inserts;       /* SYN inserts in that second (syn_insert_limit) */
};

/* Decap: an address this host accepts tunnels for. */
struct decap_key {
	__u32 addr[4];
	__u8 family;
	__u8 pad[3];
};

/* Decap: a prefix of a second-chance allow-list (LPM trie key). prefixlen counts the 32 bits of
 * family and pad first, then the address bits: an IPv4 /24 is 32 + 24, an IPv6 /64 is 32 + 64, so
 * that a prefix of one family never matches an address of the other. pad is zero. */
struct sc_prefix_key {
	__u32 prefixlen;
	__u8 family;
	__u8 pad[3];
	__u32 addr[4];
};
