package dnsxdp

import (
	"encoding/binary"

	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// QueryKey builds the map key of the UDP DNS payload raw exactly as bpf/dnsxdp.c does, and
// returns the qname's wire length; ok is false for a query the program passes to the socket
// (the dns package fills the map only with answers to queries the program can match).
func QueryKey(raw []byte) (k Key, nlen int, ok bool) {
	if len(raw) < 12+1+4 || len(raw) > 12+nameMax+4+optLen+4+cookieMax {
		return k, 0, false
	}
	if raw[2]&0xfe != 0 || raw[3]&0xcf != 0 {
		return k, 0, false
	}
	if raw[4] != 0 || raw[5] != 1 || raw[6]|raw[7]|raw[8]|raw[9]|raw[10] != 0 || raw[11] > 1 {
		return k, 0, false
	}
	q := raw[12:]
	pos := 0
	for l := 0; l < 128 && q[pos] != 0; l++ {
		c := int(q[pos])
		if c > 63 {
			return k, 0, false
		}
		pos += c + 1
		if pos >= nameMax || pos >= len(q) {
			return k, 0, false
		}
	}
	if q[pos] != 0 {
		return k, 0, false
	}
	nlen = pos + 1
	for i := 0; i < nlen; i++ {
		b := q[i]
		if b >= 'A' && b <= 'Z' {
			b += 32
		}
		k.Name[i] = b
	}
	rest := len(q) - nlen
	clen := 0 // a cookie option's length (the program's rule: one COOKIE option is ignored)
	if raw[11] == 1 && rest != 4+optLen {
		clen = rest - (4 + optLen + 4)
		if clen != 8 && (clen < 16 || clen > cookieMax) {
			return k, 0, false
		}
	}
	if raw[11] == 0 && rest != 4 {
		return k, 0, false
	}
	t := q[nlen:]
	if t[2] != 0 || t[3] != 1 {
		return k, 0, false // class IN only
	}
	k.Qtype = binary.NativeEndian.Uint16(t[0:2]) // network order in memory
	if raw[11] == 1 {
		o := t[4:]
		if o[0] != 0 || o[1] != 0 || o[2] != 41 || o[5]|o[6]|o[7]|o[8] != 0 {
			return k, 0, false
		}
		if clen == 0 && o[9]|o[10] != 0 {
			return k, 0, false
		}
		if clen != 0 && (o[9] != 0 || int(o[10]) != clen+4 || o[11] != 0 || o[12] != cookieOpt || o[13] != 0 || int(o[14]) != clen) {
			return k, 0, false
		}
		k.Shape = uint8(bpfobj.DnsxdpDnsShapeDNS_SHAPE_OPT)
	}
	return k, nlen, true
}

// Pack makes the map value of resp, the socket path's answer to a query with key k and qname
// length nlen: the ID zeroed, RD and CD cleared and the qname lower-cased (the program patches
// the query's back in), with the checksum's partial sum. ok is false when resp does not fit the
// program (WireMax) or does not carry the query's question.
func Pack(resp []byte, k *Key, nlen int, gen, counter uint32) (*bpfobj.DnsxdpDnsAnswer, bool) {
	if len(resp) > WireMax || len(resp) < 12+nlen+4 {
		return nil, false
	}
	a := &bpfobj.DnsxdpDnsAnswer{Gen: gen, Counter: counter, Len: uint16(len(resp))}
	w := a.Wire[:len(resp)]
	copy(w, resp)
	w[0], w[1] = 0, 0
	w[2] &^= 0x01 // RD
	w[3] &^= 0x10 // CD
	for i := 0; i < nlen; i++ {
		b := w[12+i]
		if b >= 'A' && b <= 'Z' {
			b += 32
		}
		if b != k.Name[i] {
			return nil, false
		}
		w[12+i] = b
	}
	if binary.NativeEndian.Uint16(w[12+nlen:]) != k.Qtype || w[12+nlen+2] != 0 || w[12+nlen+3] != 1 {
		return nil, false
	}
	// One's complement sum in memory order (as bpf/include/csum.h sums), the qname counted as
	// zero: the program adds the query's own qname bytes.
	var s uint64
	for i := 0; i < len(w); i += 2 {
		lo := uint64(w[i])
		if i >= 12 && i < 12+nlen {
			lo = 0
		}
		var hi uint64
		if i+1 < len(w) && !(i+1 >= 12 && i+1 < 12+nlen) {
			hi = uint64(w[i+1])
		}
		s += lo | hi<<8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	a.Csum = uint16(s)
	return a, true
}
