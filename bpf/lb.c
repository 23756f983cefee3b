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

char LICENSE[] SEC("license") = "Dual BSD/GPL";

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

static __always_inline struct backend *backend_at(__u32 id)
{
	if (id == 0)
		return NULL;
	struct backend *be = bpf_map_lookup_elem(&backends, &id);
	if (!be || be->family == 0)
		return NULL;
	return be;
}

/* maglev_pick returns the backend id in the VIP's ring for this flow, 0 when the ring is empty. */
static __always_inline __u32 maglev_pick(const struct flow_key *f, const struct vip_meta *vip,
					 const struct lb_config *cfg)
{
	__u32 size = cfg->ring_size;
	if (size == 0)
		return 0;
	__u32 slot = vip->id * size + flow_hash(f, vip->flags) % size;
	__u32 *id = bpf_map_lookup_elem(&rings, &slot);
	return id ? *id : 0;
}

/* pick_backend chooses the backend of a flow. An established flow follows its connection-table
 * entry, so a ring change never moves it; a TCP SYN re-hashes, so a new connection follows the
 * current ring; a UDP entry idle past the timeout re-hashes. When track is false (a quoted flow
 * in an ICMP error) the table is read but never written. */
static __always_inline __u32 pick_backend(const struct flow_key *f, const struct vip_meta *vip,
					  const struct lb_config *cfg, __u8 tcp_flags, int track)
{
	/* The coarse clock (CLOCK_MONOTONIC_COARSE, a few ms resolution) is enough for idle
	 * timeouts and costs a fraction of bpf_ktime_get_ns() on the per-packet path. */
	__u64 now = bpf_ktime_get_coarse_ns();
	int syn = f->proto == IPPROTO_TCP_ && (tcp_flags & TCP_SYN) && !(tcp_flags & TCP_ACK);
	if (!syn || !track) {
		struct flow_state *st = bpf_map_lookup_elem(&conntrack, f);
		if (st && backend_at(st->backend)) {
			int expired = f->proto == IPPROTO_UDP_ && now - st->last_seen > cfg->udp_timeout_ns;
			if (!expired) {
				if (track) {
					count(CNT_CT_HIT, 0);
					if (f->proto == IPPROTO_UDP_ || now - st->last_seen > TCP_REFRESH_NS)
						st->last_seen = now;
					if ((tcp_flags & (TCP_FIN | TCP_RST)) && !(st->flags & FLOW_CLOSING))
						st->flags |= FLOW_CLOSING;
				}
				return st->backend;
			}
		}
	}
	__u32 id = maglev_pick(f, vip, cfg);
	if (!id || !backend_at(id))
		return 0;
	if (track) {
		count(syn ? CNT_CT_MISS_SYN : CNT_CT_MISS_NONSYN, 0);
		struct flow_state st = {
			.backend = id,
			.flags = (tcp_flags & (TCP_FIN | TCP_RST)) ? FLOW_CLOSING : 0,
			.last_seen = now,
		};
		bpf_map_update_elem(&conntrack, f, &st, BPF_ANY);
	}
	return id;
}

/* forward sends the packet to the flow's backend. */
static __always_inline int forward(struct xdp_md *ctx, const struct packet *p, const struct flow_key *f,
				   const struct vip_meta *vip, int track)
{
	__u32 zero = 0;
	struct lb_config *cfg = bpf_map_lookup_elem(&config, &zero);
	__u64 bytes = p->l3_len;
	if (!cfg)
		return drop(CNT_DROP_NO_BACKEND, bytes);
	__u32 id = pick_backend(f, vip, cfg, p->tcp_flags, track);
	struct backend *be = backend_at(id);
	if (!be)
		return drop(CNT_DROP_NO_BACKEND, bytes);
	__u32 overhead = encap_overhead(be);
	if (p->l3_len + overhead > cfg->mtu) {
		count(CNT_DROP_MTU, bytes);
		if ((cfg->flags & CFG_ICMP_TOOBIG) && (p->flow.family == FAMILY_V6 || p->df) &&
		    cfg->mtu > overhead && send_toobig(ctx, p, cfg->mtu - overhead) == 0) {
			count(CNT_ICMP_TOOBIG_TX, 0);
			return verdict_tx(0);
		}
		count(CNT_DROP, bytes);
		return XDP_DROP;
	}
	struct backend target = *be;
	if (encap(ctx, p, &target, cfg))
		return drop(CNT_DROP_ENCAP, bytes);
	count_in(&vip_stats, vip->id, bytes);
	count_in(&backend_stats, id, bytes);
	return verdict_tx(bytes + overhead);
}

static __always_inline struct vip_meta *vip_lookup(const struct flow_key *f, __u16 port)
{
	struct vip_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	k.port = port;
	k.proto = f->proto;
	k.family = f->family;
	return bpf_map_lookup_elem(&vips, &k);
}

static __always_inline struct vip_meta *find_vip_exact(const struct flow_key *f)
{
	return vip_lookup(f, f->dport);
}

static __always_inline struct vip_meta *find_vip_any_port(const struct flow_key *f)
{
	return vip_lookup(f, 0);
}

/* find_vip looks up {address, port, protocol}, then {address, any port, protocol}. */
static __always_inline struct vip_meta *find_vip(const struct flow_key *f)
{
	struct vip_meta *v = find_vip_exact(f);
	return v ? v : find_vip_any_port(f);
}

static __always_inline int is_vip_addr(const struct flow_key *f)
{
	struct vip_key k = {};
	__builtin_memcpy(k.addr, f->dst, 16);
	k.family = f->family;
	return bpf_map_lookup_elem(&vip_addrs, &k) != NULL;
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
		count(CNT_ICMP_FWD, p->l3_len);
		return forward(ctx, p, &f, vip, 0);
	}
	return verdict_pass(p->l3_len);
}

/* process is the whole forwarder; xdp_lb and the benchmark wrapper both call it. */
static __always_inline int process(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
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
	/* Fast path: an unfragmented TCP or UDP packet to a VIP's exact {address, port, protocol}
	 * costs one hash lookup before the connection table. */
	if (!p.ip_opts && !p.frag && (p.flow.proto == IPPROTO_TCP_ || p.flow.proto == IPPROTO_UDP_) &&
	    parse_ports(data, data_end, &p) == 0) {
		struct vip_meta *vip = find_vip_exact(&p.flow);
		if (vip)
			return forward(ctx, &p, &p.flow, vip, 1);
	}
	if (!is_vip_addr(&p.flow))
		return verdict_pass(len);

	/* Toward a VIP address from here on. */
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
	if (parse_ports(data, data_end, &p))
		return drop(CNT_DROP_MALFORMED, p.l3_len);
	struct vip_meta *vip = find_vip_any_port(&p.flow);
	if (!vip)
		return verdict_pass(len);
	return forward(ctx, &p, &p.flow, vip, 1);
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	return process(ctx);
}

/* xdp_lb_bench is for BPF_PROG_TEST_RUN benchmarks only. With repeat, the test run keeps the
 * frame the program changed, so an encapsulating program would see its own output from the second
 * pass on. This wrapper undoes the change after each pass (strips the outer header it added and
 * restores the Ethernet header) so that every pass measures the same work; the Go benchmark checks
 * the per-CPU verdict counters to prove that every pass took the expected path. */
SEC("xdp")
int xdp_lb_bench(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 eth[ETH_HLEN];
	if (data + ETH_HLEN > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth, data, ETH_HLEN);
	__u32 before = data_end - data;
	int verdict = process(ctx);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	__u32 after = data_end - data;
	if (verdict == XDP_TX && after > before) {
		if (bpf_xdp_adjust_head(ctx, (int)(after - before)))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + ETH_HLEN > data_end)
			return XDP_ABORTED;
		__builtin_memcpy(data, eth, ETH_HLEN);
	}
	return verdict;
}
