// Package splitmix holds splitmix64's finaliser, shared by the hashes that place keys on a
// Maglev table (internal/maglev) and on the L7 consistent-hash ring (l7/balance).
package splitmix

// Finalize avalanches the bits of x: every input bit flips each output bit with probability about
// one half. FNV-1a's low bits mix poorly for short, similar strings (backend addresses, virtual
// node names); finishing with this spreads them evenly.
func Finalize(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
