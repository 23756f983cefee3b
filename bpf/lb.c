// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* lb.c: switchyard's XDP forwarder. For a packet toward a VIP it picks a backend (connection
 * table, else the VIP's Maglev ring), encapsulates it (IPIP, IPv4-in-IPv6 or IP6IP6) and sends it
 * back out of the interface toward the next hop (XDP_TX) for direct server return. Everything else
 * leaves with XDP_PASS, untouched. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "include/consts.h"
#include "include/structs.h"
#include "include/maps.h"
#include "include/parse.h"
#include "include/hash.h"
#include "include/encap.h"
#include "include/icmp.h"
#include "include/quic.h"
#include "include/guard.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The enums Go takes its constants from (consts.h), for bpf2go -type (loader/third_party/bpfobj):
 * a pointer to this struct in a section that nothing loads puts them in the object's BTF. */
struct go_types {
	enum counter_index counter_index;
	enum sc_counter_index sc_counter_index;
	enum vip_flags vip_flags;
	enum flow_flags flow_flags;
	enum cfg_flags cfg_flags;
	enum vip_filter_size vip_filter_size;
	enum flow_hash flow_hash;
	enum lb_defaults lb_defaults;
	enum family family;
	enum quic_vip_bits quic_vip_bits;
	enum quic_counter_index quic_counter_index;
	enum guard_flags guard_flags;
	enum guard_sizes guard_sizes;
	enum guard_counter_index guard_counter_index;
};
SEC(".go_types") const struct go_types *go_types_ = 0;

static __always_inline int verdict_pass(__u64 bytes)
{
	count(CNT_PASS, bytes);
	return XDP_PASS;
}

static __always_inline int verdict_tx(__u64 bytes)
{
	count(CNT_TX, bytes);
	return XDP_TX;
}

static __always_inline struct lb_config *get_config(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&config, &zero);
}

static __always_inline struct backend *backend_at(__u32 id)
{
	if (id == 0)
		return NULL;
	struct backend *be = bpf_map_lookup_elem(&backends, &id);
	if (!be || be->family == 0)
		return NULL;
	return be;
}

static __always_inline __u32 vip_gen(__u32 vip_id)
{
	__u32 *g = bpf_map_lookup_elem(&vip_gens, &vip_id);
	return g ? *g : 0;
}

/* second_candidate returns the backend a packet may carry as its second chance: cand_id when
 * second chance is on, the slot is occupied and its family is the first choice's (the option sits
 * in the outer header, whose family the first choice sets). */
static __always_inline struct backend *second_candidate(const struct lb_config *cfg, const struct backend *be,
							__u32 backend_id, __u32 cand_id)
{
	if (!cand_id || cand_id == backend_id || !(cfg->flags & CFG_SECOND_CHANCE))
		return NULL;
	struct backend *cand = backend_at(cand_id);
	if (!cand || cand->family != be->family)
		return NULL;
	return cand;
}

/* sent counts a packet of bytes (inner) encapsulated with overhead toward backend_id for vip_id. */
static __always_inline int sent(struct lb_percpu *pc, __u32 vip_id, __u32 backend_id, __u64 bytes, __u32 overhead)
{
	count_in(&vip_stats, vip_id, bytes);
	count_in(&backend_stats, backend_id, bytes);
	count_pc(pc, CNT_TX, bytes + overhead);
	return XDP_TX;
}

/* send checks the MTU, encapsulates toward the backend be (backend_id, with the second candidate
 * cand_id, 0 for none) and counts in pc. A candidate that would push the packet over the MTU is
 * left off. */
static __always_inline int send(struct xdp_md *ctx, const struct packet *p, struct lb_percpu *pc,
				const struct lb_config *cfg, const struct backend *be, __u32 backend_id,
				__u32 vip_id, __u32 cand_id)
{
	__u64 bytes = p->l3_len;
	__u32 overhead = encap_overhead(be);
	struct backend *cand = second_candidate(cfg, be, backend_id, cand_id);
	if (cand) {
		if (p->l3_len + overhead + sc_overhead(be) > cfg->mtu) {
			sc_count(SC_CNT_TOO_BIG);
			cand = NULL;
		} else {
			overhead += sc_overhead(be);
		}
	}
	if (p->l3_len + overhead > cfg->mtu) {
		count_pc(pc, CNT_DROP_MTU, bytes);
		if ((cfg->flags & CFG_ICMP_TOOBIG) && (p->flow.family == FAMILY_V6 || p->df) &&
		    cfg->mtu > overhead && send_toobig(ctx, p, cfg->mtu - overhead) == 0) {
			count_pc(pc, CNT_ICMP_TOOBIG_TX, 0);
			count_pc(pc, CNT_TX, 0);
			return XDP_TX;
		}
		count_pc(pc, CNT_DROP, bytes);
		count_in(&vip_drops, vip_id, bytes);
		return XDP_DROP;
	}
	struct inner in = inner_of(p);
	if (encap(ctx, &in, be, cand, cfg))
		return drop_vip(CNT_DROP_ENCAP, vip_id, bytes);
	if (cand)
		sc_count(SC_CNT_SENT);
	return sent(pc, vip_id, backend_id, bytes, overhead);
}

/* send_to is send for a backend id that may name an empty slot (dropped: no backend). */
static __always_inline int send_to(struct xdp_md *ctx, const struct packet *p, struct lb_percpu *pc,
				   __u32 backend_id, __u32 vip_id, __u32 cand_id)
{
	struct lb_config *cfg = get_config();
	struct backend *be = backend_at(backend_id);
	if (!cfg || !be)
		return drop_vip(CNT_DROP_NO_BACKEND, vip_id, p->l3_len);
	return send(ctx, p, pc, cfg, be, backend_id, vip_id, cand_id);
}

/* flow_backend is the backend of a connection-table entry that is still valid: its VIP's
 * generation unchanged and its backend slot occupied; else NULL. */
static __always_inline struct backend *flow_backend(const struct flow_state *st)
{
	if (vip_gen(st->vip_id) != st->vip_gen)
		return NULL;
	return backend_at(st->backend);
}

/* flow_touch refreshes the entry a packet follows: last_seen (for TCP at most once a second, to
 * keep the path read-mostly), and the closing mark on a FIN or RST. It returns -1, changing
 * nothing, for a UDP entry idle past udp_timeout: the packet re-hashes. */
static __always_inline int flow_touch(struct flow_state *st, __u64 now, const struct lb_config *cfg,
				      __u8 proto, __u8 tcp_flags)
{
	if (proto == IPPROTO_UDP_) {
		if (now - st->last_seen > cfg->udp_timeout_ns)
			return -1;
		st->last_seen = now;
	} else if (now - st->last_seen > TCP_REFRESH_NS) {
		st->last_seen = now;
	}
	if ((tcp_flags & (TCP_FIN | TCP_RST)) && !(st->flags & FLOW_CLOSING))
		st->flags |= FLOW_CLOSING;
	return 0;
}

/* established handles a non-SYN TCP or a UDP packet whose connection-table entry is still valid:
 * its VIP generation unchanged, its backend slot occupied, and for UDP not idle past the timeout.
 * It returns -1 when the packet must take the slow path (VIP lookup, Maglev). An established flow
 * never looks at the ring, so a ring change (drain, weights) never moves it. A flow whose SYN
 * made an unconfirmed entry is confirmed here, by its first non-SYN packet. */
static __always_inline int established(struct xdp_md *ctx, const struct packet *p, const struct lb_config *cfg,
				       struct lb_percpu *pc)
{
	struct flow_state *st = ct_lookup(&p->flow);
	if (!st) {
		st = ct_promote(&p->flow);
		if (!st)
			return -1;
		guard_count(GUARD_CNT_UNCONFIRMED, 0);
	}
	struct backend *be = flow_backend(st);
	if (!be || !cfg)
		return -1;
	if (flow_touch(st, now_pc(pc), cfg, p->flow.proto, p->tcp_flags))
		return -1;
	count_pc(pc, CNT_CT_HIT, 0);
	return send(ctx, p, pc, cfg, be, st->backend, st->vip_id, st->backend2);
}

/* vip_key_words is a VIP key as its five words. */
union vip_key_words {
	struct vip_key k;
	__u32 w[5];
};

/* vip_lookup finds the VIP of a key: in this CPU's vip_cache when its slot holds that key at the
 * current vips_version (two inlined array reads and a compare), else in vips (a hash lookup,
 * which costs several times that), refilling the slot. The version is read before vips, so a
 * copy made of an entry that changes meanwhile carries the version before the change and is
 * never used again; a key vips does not hold is not cached. The key's last word (port, protocol,
 * family; little-endian, as the target) is made in a register, not by narrow stores that a word
 * load would then have to wait for; the slot is a multiplicative hash of the words. */
static __always_inline struct vip_meta *vip_lookup(const struct flow_key *f, __u16 port)
{
	union vip_key_words key;
	key.w[0] = f->dst[0];
	key.w[1] = f->dst[1];
	key.w[2] = f->dst[2];
	key.w[3] = f->dst[3];
	key.w[4] = port | (__u32)f->proto << 16 | (__u32)f->family << 24;
	__u32 zero = 0;
	__u32 slot = ((key.w[0] ^ key.w[1] ^ key.w[2] ^ key.w[3] ^ key.w[4]) * 0x9e3779b1U) >> (32 - VIP_CACHE_BITS);
	__u32 *ver = bpf_map_lookup_elem(&vips_version, &zero);
	struct vip_cache_entry *c = bpf_map_lookup_elem(&vip_cache, &slot);
	if (!ver || !c)
		return bpf_map_lookup_elem(&vips, &key.k);
	__u32 version = *ver;
	const __u32 *cw = (const __u32 *)&c->key;
	if (c->version == version && ((cw[0] ^ key.w[0]) | (cw[1] ^ key.w[1]) | (cw[2] ^ key.w[2]) |
				      (cw[3] ^ key.w[3]) | (cw[4] ^ key.w[4])) == 0)
		return &c->meta;
	struct vip_meta *m = bpf_map_lookup_elem(&vips, &key.k);
	if (m) {
		c->key = key.k;
		c->meta = *m;
		c->version = version;
	}
	return m;
}

/* find_vip looks up {address, port, protocol}, then {address, any port, protocol}. */
static __always_inline struct vip_meta *find_vip(const struct flow_key *f)
{
	struct vip_meta *v = vip_lookup(f, f->dport);
	return v ? v : vip_lookup(f, 0);
}

/* Ethernet, a 20-byte IPv4 header and 14 bytes of transport header (the TCP flags): the least
 * that fast4 reads. */
#define FAST4_MIN (ETH_HLEN + IPV4_HDR_LEN + 14)

/* syn4 is the guard of a TCP SYN in fast4's frame (its fields read by fast4), before anything
 * is parsed: the SYN's VIP is looked up from the header as read, and a SYN the VIP's guard refuses
 * is dropped here, so a flood's SYN costs no parse (docs/xdp.md, "The guard"). It returns the
 * verdict of a drop, or -1 with *vipp set to the VIP (NULL when none, or when the frame is not
 * addressed to this balancer's MAC): process() then goes on with the SYN, looks the VIP up only
 * when *vipp is NULL, and runs the guard only then. */
static __always_inline int syn4(void *data, const __u32 *ip, const __u8 *l4, __u32 tot, struct vip_meta **vipp)
{
	struct lb_config *cfg = get_config();
	if (!cfg || foreign_mac(data, cfg))
		return -1;
	struct flow_key f = {
		.src = {ip[3]},
		.dst = {ip[4]},
		.sport = *(__u16 *)l4,
		.dport = *(__u16 *)(l4 + 2),
		.proto = IPPROTO_TCP_,
		.family = FAMILY_V4,
	};
	struct vip_meta *vip = find_vip(&f);
	if (!vip)
		return -1;
	int g = guard_check(&f, vip->id, 1, percpu(), tot);
	if (g >= 0)
		return guard_drop(g, vip->id, tot);
	*vipp = vip;
	return -1;
}

/* fast4 is the established path of the common frame, read straight from the frame into registers
 * (no struct packet, one bounds check): untagged Ethernet, IPv4 without options or fragment bits,
 * a TCP packet that is not a SYN or a UDP datagram, whose lengths are consistent (parse_ports'
 * checks) and whose connection-table entry is valid, with no second candidate to carry and no
 * MTU problem. A SYN of that frame goes to syn4 (the guard). It returns -1 for every other frame,
 * having changed nothing but what syn4 did to a SYN: process() then takes it from the start, and
 * decides as it always did. */
static __always_inline int fast4(struct xdp_md *ctx, void *data, void *data_end, struct vip_meta **syn_vip)
{
	if (data + FAST4_MIN > data_end)
		return -1;
	__u32 *ip = data + ETH_HLEN;
	__u32 w0 = ip[0];
	if ((w0 & 0xff) != 0x45 || (ip[1] & bpf_htonl(IP_MF | IP_OFFMASK)))
		return -1; /* not version 4 with a 20-byte header, or a fragment */
	__u32 tot = bpf_ntohs(w0 >> 16);
	if (tot < IPV4_HDR_LEN || data + ETH_HLEN + tot > data_end)
		return -1;
	__u32 payload = tot - IPV4_HDR_LEN;
	__u8 proto = ((__u8 *)ip)[9];
	__u8 *l4 = (__u8 *)(ip + 5);
	__u8 flags = 0;
	if (proto == IPPROTO_TCP_) {
		flags = l4[13];
		__u32 doff = l4[12] >> 4;
		if (doff < 5 || doff * 4 > payload)
			return -1;
		if ((flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)
			return syn4(data, ip, l4, tot, syn_vip);
	} else if (proto == IPPROTO_UDP_) {
		__u32 ulen = bpf_ntohs(*(__u16 *)(l4 + 4));
		if (ulen < 8 || ulen > payload)
			return -1;
	} else {
		return -1;
	}
	/* The configuration and the MAC check before the lookup: an inlined array read, no call,
	 * and then nothing after the lookup reads the frame. */
	struct lb_config *cfg = get_config();
	if (!cfg || foreign_mac(data, cfg))
		return -1;
	/* struct flow_key4 as two words: the addresses as they sit in the header, then the ports
	 * and the protocol (pad zero). */
	union {
		struct flow_key4 k;
		__u64 w[2];
	} key;
	key.w[0] = *(__u64 *)(ip + 3);
	key.w[1] = *(__u32 *)l4 | ((__u64)proto << 32);
	struct flow_state *st = bpf_map_lookup_elem(&conntrack4, &key);
	if (!st)
		return -1;
	struct backend *be = flow_backend(st);
	/* backend2 is read only when second chance is on: it is the entry's last word, and in a cold
	 * table it sits, for one kernel LRU element in eight (88 bytes each), on a cache line that
	 * nothing else this path reads is on. */
	if (!be || ((cfg->flags & CFG_SECOND_CHANCE) && st->backend2))
		return -1;
	__u32 overhead = encap_overhead(be);
	if (tot + overhead > cfg->mtu)
		return -1;
	struct lb_percpu *pc = percpu();
	if (!pc) /* never (a one-entry array): the counters below then check nothing */
		return -1;
	/* The clock as now_pc caches it this jiffy. The first packet of a jiffy, which finds it stale,
	 * takes the general path (established(), the same decision), which reads the clock: so the
	 * lookup is this path's only helper call before the encapsulation, and what it read of the
	 * frame stays in registers instead of being saved on the stack around a second call. */
	if (pc->clock_jiffies != bpf_jiffies64() || pc->clock_ns == 0)
		return -1;
	if (flow_touch(st, pc->clock_ns, cfg, proto, flags))
		return -1;
	count_pc(pc, CNT_CT_HIT, 0);
	__u32 src = key.k.src;
	__u32 sport = key.k.sport;
	struct inner in = {
		.entropy = mm3_fmix(src ^ (sport << 16) ^ sport), /* flow_entropy of an IPv4 flow */
		.len = tot,
		.tos = w0 >> 8,
		.proto = IPPROTO_IPIP_,
	};
	__u32 backend_id = st->backend, vip_id = st->vip_id;
	if (encap_l2(ctx, &in, be, NULL, cfg, ETH_HLEN))
		return drop_vip(CNT_DROP_ENCAP, vip_id, tot);
	return sent(pc, vip_id, backend_id, tot, overhead);
}

/* ring_slot is the index of this flow's slot in the rings16 (and prev_rings16) map: the VIP's
 * own ring, ring_size slots from ring_off. -1 when the VIP has no ring yet. */
static __always_inline long ring_slot(const struct flow_key *f, const struct vip_meta *vip)
{
	__u32 size = vip->ring_size;
	if (size == 0)
		return -1;
	return (long)vip->ring_off + flow_hash(f, vip->flags) % size;
}

/* ring_id reads a slot of a ring map (RING_WORD_SLOTS slots a value): a backend id, 0 for none
 * (the slot may name an empty backend slot). */
static __always_inline __u32 ring_id(void *ring, long slot)
{
	if (slot < 0)
		return 0;
	__u32 k = (__u32)slot / RING_WORD_SLOTS;
	struct ring_word *w = bpf_map_lookup_elem(ring, &k);
	if (!w)
		return 0;
	return w->id[slot & (RING_WORD_SLOTS - 1)];
}

/* ring_at reads a slot of a ring map (RING_WORD_SLOTS slots a value): a backend id whose backend
 * slot is occupied, else 0. */
static __always_inline __u32 ring_at(void *ring, long slot)
{
	__u32 id = ring_id(ring, slot);
	if (!backend_at(id))
		return 0;
	return id;
}

/* maglev_pick returns the backend id in the VIP's ring for this flow, 0 when the ring is empty. */
static __always_inline __u32 maglev_pick(const struct flow_key *f, const struct vip_meta *vip)
{
	return ring_at(&rings16, ring_slot(f, vip));
}

/* syn_guarded is the optional guard on SYN inserts (syn_insert_limit, off by default), Katran's
 * MAX_CONN_RATE made a setting: past the limit of new entries a second on this CPU, a SYN is
 * forwarded by the ring without an entry, so a SYN flood cannot churn the connection table. The
 * connection's next packet then misses and is placed by the ring (the same backend unless the
 * ring changed meanwhile; second chance covers that case). */
static __always_inline int syn_guarded(struct lb_percpu *pc, const struct lb_config *cfg, __u64 now)
{
	if (!pc || !cfg || !cfg->syn_insert_limit)
		return 0;
	if (now - pc->syn_window_ns > 1000000000ULL) {
		pc->syn_window_ns = now;
		pc->syn_inserts = 0;
	}
	if (pc->syn_inserts >= cfg->syn_insert_limit)
		return 1;
	pc->syn_inserts++;
	return 0;
}

/* new_flow picks a backend from the ring and records the choice (a SYN always comes here, so
 * new connections follow the current ring). A mid-stream TCP packet that comes here (its entry
 * was lost, or another balancer carried the flow until now) may belong to a connection that began
 * before the ring last changed: when the previous ring's pick differs, that pick is recorded as
 * the flow's second candidate, and every packet of the flow carries it (see docs/xdp.md). */
static __always_inline int new_flow(struct xdp_md *ctx, const struct packet *p, const struct vip_meta *vip,
				    const struct lb_config *cfg, struct lb_percpu *pc)
{
	long slot = ring_slot(&p->flow, vip);
	__u32 id = ring_id(&rings16, slot);
	struct backend *be = backend_at(id);
	if (!be)
		return drop_vip(CNT_DROP_NO_BACKEND, vip->id, p->l3_len);
	int tcp = p->flow.proto == IPPROTO_TCP_;
	int syn = tcp && (p->tcp_flags & TCP_SYN) && !(p->tcp_flags & TCP_ACK);
	count_pc(pc, syn ? CNT_CT_MISS_SYN : CNT_CT_MISS_NONSYN, 0);
	__u32 prev = 0;
	if (tcp && !syn && cfg && (cfg->flags & CFG_SECOND_CHANCE)) {
		prev = ring_at(&prev_rings16, slot);
		struct backend *old = backend_at(prev);
		if (prev == id || !old || be->family != old->family)
			prev = 0; /* the option sits in the outer header: same family only */
		if (prev)
			sc_count(SC_CNT_FLOWS);
	}
	struct flow_state st = {
		.backend = id,
		.vip_id = vip->id,
		.vip_gen = vip_gen(vip->id),
		.flags = (p->tcp_flags & (TCP_FIN | TCP_RST)) ? FLOW_CLOSING : 0,
		.last_seen = now_pc(pc),
		.backend2 = prev,
	};
	/* A SYN whose 5-tuple has an entry (a retransmitted SYN, a flood that repeats its tuples: in
	 * the unconfirmed table; a reused port: in the connection table) rewrites that entry in
	 * place: the kernel's update would take a free entry, swap it in and free the old one, three
	 * times the cost of the lookup (docs/xdp.md). Any other SYN gets an unconfirmed entry. */
	struct flow_state *old = NULL;
	if (syn) {
		old = ct_syn_lookup(&p->flow);
		if (!old)
			old = ct_lookup(&p->flow);
	}
	if (old)
		*old = st;
	else if (syn && syn_guarded(pc, cfg, st.last_seen))
		count_pc(pc, CNT_CT_INSERT_SKIPPED, 0);
	else if (syn)
		ct_syn_update(&p->flow, &st);
	else
		ct_update(&p->flow, &st);
	if (!cfg)
		return drop_vip(CNT_DROP_NO_BACKEND, vip->id, p->l3_len);
	return send(ctx, p, pc, cfg, be, id, vip->id, prev);
}

/* quic_route sends a UDP packet toward a QUIC VIP to the backend that its connection ID's server
 * ID names (include/quic.h), and records the flow so that its next packets take the established
 * path. It returns -1, counted by reason, when the packet must take the Maglev path instead. */
static __always_inline int quic_route(struct xdp_md *ctx, const struct packet *p, const struct vip_meta *vip)
{
	int initial;
	long sid = quic_server_id((void *)(long)ctx->data, (void *)(long)ctx->data_end, p, vip->flags, &initial);
	__u32 *id = NULL;
	if (sid >= 0) {
		__u32 k = sid;
		id = bpf_map_lookup_elem(&quic_servers, &k);
	}
	if (!id || !backend_at(*id)) {
		quic_count(initial ? QUIC_CNT_INITIAL : sid >= 0 ? QUIC_CNT_UNKNOWN : QUIC_CNT_NO_ID, p->l3_len);
		return -1;
	}
	struct lb_percpu *pc = percpu();
	struct flow_state st = {
		.backend = *id,
		.vip_id = vip->id,
		.vip_gen = vip_gen(vip->id),
		.last_seen = now_pc(pc),
	};
	ct_update(&p->flow, &st);
	quic_count(QUIC_CNT_ROUTED, p->l3_len);
	return send_to(ctx, p, pc, st.backend, vip->id, 0);
}

/* vip_filter_has reads the vip_filter slot of a destination address whose words XOR to x. */
static __always_inline int vip_filter_has(__u32 x)
{
	__u32 slot = vip_slot_xor(x);
	__u32 *bit = bpf_map_lookup_elem(&vip_filter, &slot);
	return bit && *bit;
}

/* frame_maybe_vip is the cheap filter, run before anything is parsed: it reads the destination
 * address of an IPv4 or IPv6 frame (at most one VLAN tag) and looks it up in vip_filter. False
 * proves the frame is not toward a VIP address (or is not IP, or is truncated), and the frame
 * passes: traffic for the host costs two loads and an array lookup, no parse, no hash lookup. */
static __always_inline int frame_maybe_vip(void *data, void *data_end)
{
	__u8 *p = data;
	__u32 off = ETH_HLEN;
	if ((void *)(p + ETH_HLEN + 4) > data_end)
		return 0;
	__u16 proto = *(__u16 *)(p + 12);
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		proto = *(__u16 *)(p + 16);
		off += 4;
	}
	__u32 x;
	if (proto == bpf_htons(ETH_P_IP)) {
		if ((void *)(p + off + 20) > data_end)
			return 0;
		x = *(__u32 *)(p + off + 16);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(p + off + 40) > data_end)
			return 0;
		__u32 *d = (__u32 *)(p + off + 24);
		x = d[0] ^ d[1] ^ d[2] ^ d[3];
	} else {
		return 0;
	}
	return vip_filter_has(x);
}

static __always_inline int is_vip_addr(const struct flow_key *f)
{
	struct vip_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	k.family = f->family;
	return bpf_map_lookup_elem(&vip_addrs, &k) != NULL;
}

/* quoted_backend picks the backend of the flow an ICMP error quotes: its connection-table entry
 * when valid, else the ring (the table is never written for it). */
static __always_inline __u32 quoted_backend(const struct flow_key *f, const struct vip_meta *vip)
{
	struct flow_state *st = ct_lookup(f);
	if (st && flow_backend(st))
		return st->backend;
	return maglev_pick(f, vip);
}

/* handle_icmp deals with ICMP toward a VIP address: echo requests are answered here, frag-needed
 * and packet-too-big go to the backend of the flow they quote, anything else passes. */
static __always_inline int handle_icmp(struct xdp_md *ctx, struct packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = p->l4_off;
	if (off > MAX_L4_OFF)
		return drop(CNT_DROP_MALFORMED, p->l3_len);
	__u8 *hdr = data + off;
	if ((void *)(hdr + 8) > data_end)
		return drop(CNT_DROP_MALFORMED, p->l3_len);
	__u8 type = hdr[0], code = hdr[1];
	int v4 = p->flow.family == FAMILY_V4;
	if ((v4 && type == ICMP_ECHO_ && code == 0) || (!v4 && type == ICMPV6_ECHO_REQUEST_ && code == 0)) {
		int err = v4 ? echo_reply_v4(data, data_end, p) : echo_reply_v6(data, data_end, p);
		if (err)
			return drop(CNT_DROP_MALFORMED, p->l3_len);
		count(CNT_ICMP_ECHO, p->l3_len);
		return verdict_tx(p->l3_len);
	}
	if ((v4 && type == ICMP_DEST_UNREACH_ && code == ICMP_FRAG_NEEDED_) || (!v4 && type == ICMPV6_PKT_TOOBIG_)) {
		struct flow_key f = {};
		if (quoted_flow(data, data_end, p, &f))
			return drop(CNT_DROP_MALFORMED, p->l3_len);
		struct vip_meta *vip = find_vip(&f);
		if (!vip)
			return verdict_pass(p->l3_len);
		__u32 id = quoted_backend(&f, vip);
		if (!id)
			return drop_vip(CNT_DROP_NO_BACKEND, vip->id, p->l3_len);
		count(CNT_ICMP_FWD, p->l3_len);
		return send_to(ctx, p, percpu(), id, vip->id, 0);
	}
	return verdict_pass(p->l3_len);
}

/* process is the whole forwarder; xdp_lb and the benchmark wrapper both call it. */
static __always_inline int process(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct vip_meta *vip = NULL; /* a SYN's VIP, looked up and guarded by fast4 (syn4) */
	/* Traffic for the host itself: no parse, an array lookup, no hash lookup. The common frame,
	 * untagged IPv4, is filtered on the words fast4 reads anyway; then fast4 tries the
	 * established path. */
	if (data + FAST4_MIN <= data_end && *(__u16 *)(data + 12) == bpf_htons(ETH_P_IP)) {
		if (!vip_filter_has(*(__u32 *)(data + ETH_HLEN + 16)))
			return verdict_pass(len);
		int fast = fast4(ctx, data, data_end, &vip);
		if (fast >= 0)
			return fast;
		/* fast4 changed nothing: the frame's bounds are read again rather than kept across
		 * its calls. */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		len = data_end - data;
		if (data + ETH_HLEN + 4 > data_end)
			return verdict_pass(len);
	} else if (!frame_maybe_vip(data, data_end)) {
		return verdict_pass(len);
	}
	struct lb_config *cfg = get_config();
	if (cfg && foreign_mac(data, cfg)) {
		guard_count(GUARD_CNT_FOREIGN_MAC, len);
		return verdict_pass(len);
	}

	struct packet p = {};
	if (parse_eth(data, data_end, &p))
		return verdict_pass(len);
	if (p.eth_proto == ETH_P_IP) {
		if (parse_ipv4(data, data_end, &p))
			return verdict_pass(len);
	} else if (p.eth_proto == ETH_P_IPV6) {
		if (parse_ipv6(data, data_end, &p))
			return verdict_pass(len);
	} else {
		return verdict_pass(len);
	}
	/* Fast path for unfragmented TCP and UDP: an established flow costs one connection-table
	 * lookup; a SYN or a new flow one VIP lookup more. */
	int ports = -1;
	if (!p.ip_opts && !p.frag && (p.flow.proto == IPPROTO_TCP_ || p.flow.proto == IPPROTO_UDP_))
		ports = parse_ports(data, data_end, &p);
	int l4 = ports == 0;
	if (l4) {
		int syn = p.flow.proto == IPPROTO_TCP_ && (p.tcp_flags & TCP_SYN) && !(p.tcp_flags & TCP_ACK);
		struct lb_percpu *pc = percpu();
		if (!syn) {
			int v = established(ctx, &p, cfg, pc);
			if (v >= 0)
				return v;
		}
		if (!vip) {
			vip = find_vip(&p.flow);
			/* The guard: new flows only, before anything costs a ring lookup or an entry
			 * (a SYN fast4 read had it in syn4). */
			int g = vip ? guard_check(&p.flow, vip->id, syn || p.flow.proto == IPPROTO_UDP_, pc, p.l3_len) : -1;
			if (g >= 0)
				return guard_drop(g, vip->id, p.l3_len);
		}
		if (vip) {
			/* QUIC VIPs only, after the connection table (docs/xdp.md, "QUIC by
			 * connection ID"): the established path is the same for every flow. */
			if ((vip->flags & (VIP_QUIC_KATRAN | VIP_QUIC_LB)) && p.flow.proto == IPPROTO_UDP_) {
				int v = quic_route(ctx, &p, vip);
				if (v >= 0)
					return v;
			}
			return new_flow(ctx, &p, vip, cfg, pc);
		}
	}
	if (!is_vip_addr(&p.flow))
		return verdict_pass(len);

	/* Toward a VIP address, but not a balanced TCP/UDP flow. */
	if (p.ip_opts)
		return drop(CNT_DROP_IP_OPTS, p.l3_len);
	if (p.frag)
		return drop(CNT_DROP_FRAG, p.l3_len);
	if (p.flow.proto == IPPROTO_ICMP_ && p.flow.family == FAMILY_V4)
		return handle_icmp(ctx, &p);
	if (p.flow.proto == IPPROTO_ICMPV6_ && p.flow.family == FAMILY_V6)
		return handle_icmp(ctx, &p);
	if (p.flow.proto != IPPROTO_TCP_ && p.flow.proto != IPPROTO_UDP_)
		return verdict_pass(len);
	if (ports == PARSE_BAD) { /* the ports were read: count the drop in their VIP's too */
		struct vip_meta *vip = find_vip(&p.flow);
		if (vip)
			return drop_vip(CNT_DROP_MALFORMED, vip->id, p.l3_len);
	}
	if (!l4)
		return drop(CNT_DROP_MALFORMED, p.l3_len);
	return verdict_pass(len); /* a port of a VIP address that no VIP balances */
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	return process(ctx);
}
