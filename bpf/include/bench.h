/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* bench.h: the BPF_PROG_TEST_RUN wrappers of bench-xdp (docs/xdp.md, "Benchmark"), shared by
 * switchyard's forwarder (bpf/bench.c, on lb.c's code) and the Katran peer
 * (bench/katran/katran_bench.c), so that both are timed through the same wrapper code. Self-contained on purpose: it needs only struct
 * xdp_md and bpf_xdp_adjust_head, which both programs' helper headers declare.
 *
 * With repeat, the test run keeps the frame a program changed, so an encapsulating program would
 * see its own output from the second pass on. A wrapper calls the forwarder (inlined), then strips
 * the outer header it added and restores the Ethernet header, so that every pass measures the
 * same work.
 *
 * The "flows" wrappers then also move the frame on to the next flow of a set of 2^20: the low 20
 * bits of the IPv4 source address advance by the IPv4 identification field (odd: a stride coprime
 * to 2^20, so every flow comes once in 2^20 passes). Neither forwarder reads the IP id or checks
 * the IP checksum. A prefill with stride 1 and a timed run with a large stride visit the table's
 * entries in unrelated orders, so the timed run finds them cold in the cache. */
#pragma once

#define BENCH_ETH_HLEN 14
#define BENCH_FLOW_MASK 0xfffffU /* 2^20 flows */

/* bench_next_flow moves an untagged IPv4 frame on to its next flow (see above). */
static __attribute__((always_inline)) inline void bench_next_flow(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	if ((void *)(p + BENCH_ETH_HLEN + 20) > (void *)(long)ctx->data_end)
		return;
	if (p[12] != 0x08 || p[13] != 0x00)
		return;
	unsigned char *ip = p + BENCH_ETH_HLEN;
	unsigned int stride = ((unsigned int)ip[4] << 8) | ip[5];
	unsigned int src = ((unsigned int)ip[12] << 24) | ((unsigned int)ip[13] << 16) |
			   ((unsigned int)ip[14] << 8) | ip[15];
	src = (src & ~BENCH_FLOW_MASK) | ((src + stride) & BENCH_FLOW_MASK);
	ip[12] = src >> 24;
	ip[13] = src >> 16;
	ip[14] = src >> 8;
	ip[15] = src;
}

/* BENCH_WRAPPER defines the XDP program NAME that runs PROCESS(ctx) and undoes its encapsulation;
 * with FLOWS, it then moves the frame on to the next flow. */
#define BENCH_WRAPPER(NAME, PROCESS, FLOWS)                                                          \
	SEC("xdp") int NAME(struct xdp_md *ctx)                                                       \
	{                                                                                            \
		void *data = (void *)(long)ctx->data;                                                \
		void *data_end = (void *)(long)ctx->data_end;                                        \
		if (data + BENCH_ETH_HLEN > data_end)                                                \
			return XDP_ABORTED;                                                          \
		/* Word loads (x86 has no alignment rule; a byte copy would cost the wrapper more */ \
		/* than the programs it wraps). */                                                  \
		__u64 eth0 = *(__u64 *)data;                                                         \
		__u32 eth1 = *(__u32 *)(data + 8);                                                   \
		__u16 eth2 = *(__u16 *)(data + 12);                                                  \
		unsigned int before = data_end - data;                                               \
		int verdict = PROCESS(ctx);                                                          \
		data = (void *)(long)ctx->data;                                                      \
		data_end = (void *)(long)ctx->data_end;                                              \
		unsigned int after = data_end - data;                                                \
		if (verdict == XDP_TX && after > before) {                                           \
			if (bpf_xdp_adjust_head(ctx, (int)(after - before)))                         \
				return XDP_ABORTED;                                                  \
			data = (void *)(long)ctx->data;                                              \
			data_end = (void *)(long)ctx->data_end;                                      \
			if (data + BENCH_ETH_HLEN > data_end)                                        \
				return XDP_ABORTED;                                                  \
			*(__u64 *)data = eth0;                                                       \
			*(__u32 *)(data + 8) = eth1;                                                 \
			*(__u16 *)(data + 12) = eth2;                                                \
		}                                                                                    \
		if (FLOWS)                                                                           \
			bench_next_flow(ctx);                                                        \
		return verdict;                                                                      \
	}
