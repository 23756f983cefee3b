// Package wire holds the few message helpers that the DNS server's message path, its zone
// transfers (package xfr) and its updates (package update) share: the header-only answer to a
// query that cannot be parsed, the check of a header's record counts, Extended DNS Errors and
// RFC 1982 serial comparison.
package wire

import (
	"encoding/binary"

	mdns "github.com/miekg/dns"
)

// HeaderOnly answers a query that could not be parsed: the ID and opcode are echoed, every
// section is empty.
func HeaderOnly(raw []byte, rcode int) []byte {
	b := make([]byte, 12)
	copy(b, raw[:2])
	b[2] = 0x80 | raw[2]&0x78 | raw[2]&0x01 // QR, opcode, RD
	b[3] = byte(rcode & 0xF)
	return b
}

// CountsLie reports whether the header of raw announces more records than req (its parse)
// holds: the parser stops at the end of the message and keeps what it found, but a query whose
// counts lie is malformed (docs/dns.md promises FORMERR, and NSD and Knot answer it).
func CountsLie(raw []byte, req *mdns.Msg) bool {
	return int(binary.BigEndian.Uint16(raw[4:])) != len(req.Question) ||
		int(binary.BigEndian.Uint16(raw[6:])) != len(req.Answer) ||
		int(binary.BigEndian.Uint16(raw[8:])) != len(req.Ns) ||
		int(binary.BigEndian.Uint16(raw[10:])) != len(req.Extra)
}

// AddEDE attaches an Extended DNS Error (RFC 8914) to the response's OPT; without EDNS in the
// query there is no OPT and nothing is added.
func AddEDE(resp *mdns.Msg, code uint16) {
	for _, rr := range resp.Extra {
		if o, ok := rr.(*mdns.OPT); ok {
			o.Option = append(o.Option, &mdns.EDNS0_EDE{InfoCode: code})
			return
		}
	}
}

// SerialLess compares SOA serials in RFC 1982 arithmetic: a < b. Transfers judge a secondary's
// serial by it and updates the serial they raise.
func SerialLess(a, b uint32) bool {
	return a != b && (b-a) < 1<<31
}
