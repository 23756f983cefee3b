/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* csum.h: Internet checksum helpers (RFC 1071, incremental update per RFC 1624). */
#pragma once
#include <linux/types.h>

static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* csum_replace16 updates a checksum for one 16-bit word changed from old to new. */
static __always_inline __u16 csum_replace16(__u16 check, __u16 old, __u16 new)
{
	__u32 s = (__u16)~check + (__u16)~old + (__u32) new;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* ipv4_csum computes the checksum of a 20-byte IPv4 header whose check field is zero. */
static __always_inline __u16 ipv4_csum(void *hdr)
{
	__u16 *w = hdr;
	__u64 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	return csum_fold(s);
}

/* ipv4_csum_opt computes the checksum of a 28-byte IPv4 header (with the second-chance option)
 * whose check field is zero. */
static __always_inline __u16 ipv4_csum_opt(void *hdr)
{
	__u16 *w = hdr;
	__u64 s = 0;
#pragma unroll
	for (int i = 0; i < 14; i++)
		s += w[i];
	return csum_fold(s);
}
