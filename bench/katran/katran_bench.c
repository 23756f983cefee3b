// SPDX-License-Identifier: GPL-2.0-only
/* katran_bench.c: a BPF_PROG_TEST_RUN wrapper around Katran's XDP forwarder, for bench-xdp only
 * (docs/xdp.md, "Benchmark"). It is compiled at bench time against Katran's own sources
 * (KATRAN_DIR: balancer.bpf.c is #included from there, never copied into this tree), so the object
 * is Katran's code under Katran's license (GPL-2.0); this file only adds the wrapper.
 *
 * The wrappers are switchyard's own (bpf/include/bench.h, found on the include path): they call
 * Katran's entry point inlined, as one program, then strip the outer header Katran added and
 * restore the Ethernet header, so that every pass measures the same work.
 *
 * Build (loader/katran_bench_test.go does this at bench time, into a temporary directory whose
 * "katran" entry links to KATRAN_DIR): Katran's flags (its Makefile-bpf) plus -g for the BTF that
 * its .maps section needs, and -DMAX_CONN_RATE=... for the variant that inserts every SYN. */

/* Katran's own headers first (in balancer.bpf.c's order; each has an include guard), so that the
 * maps are defined with the usual SEC() ... */
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "katran/lib/linux_includes/bpf.h"
#include "katran/lib/linux_includes/bpf_helpers.h"
#include "katran/lib/linux_includes/jhash.h"

#include "katran/lib/bpf/balancer_consts.h"
#include "katran/lib/bpf/balancer_helpers.h"
#include "katran/lib/bpf/balancer_maps.h"
#include "katran/lib/bpf/balancer_structs.h"
#include "katran/lib/bpf/handle_icmp.h"
#include "katran/lib/bpf/pckt_encap.h"
#include "katran/lib/bpf/pckt_parsing.h"

/* ... then balancer.bpf.c itself with SEC() also asking for inlining, so that its entry point
 * balancer_ingress is inlined into the wrapper below instead of being called (the attribute is
 * ignored on the license variable, the only other SEC() user there). */
#undef SEC
#define SEC(NAME) __attribute__((section(NAME), used, always_inline))
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wignored-attributes"
#include "katran/lib/bpf/balancer.bpf.c"
#pragma clang diagnostic pop
#undef SEC
#define SEC(NAME) __attribute__((section(NAME), used))

/* The same wrappers as switchyard's xdp_lb_bench and xdp_lb_bench_flows (bpf/include/bench.h). */
#include "bench.h"
BENCH_WRAPPER(katran_bench, balancer_ingress, 0)
BENCH_WRAPPER(katran_bench_flows, balancer_ingress, 1)
