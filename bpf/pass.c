// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* pass.c: xdp_pass, attached to the peer of a veth that receives XDP_TX frames. A veth drops frames
 * sent to it by XDP_TX/XDP_REDIRECT unless the receiving peer runs an XDP program (or has GRO/NAPI
 * enabled); this one passes everything and makes the lab's forwarding path work. The benchmarks'
 * reference programs are in bench.c. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
