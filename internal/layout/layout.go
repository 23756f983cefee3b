// Package layout holds the limits of the forwarder's map layout that a configuration is checked
// against, in a package without the loader's BPF dependencies: control/config validates with
// them, loader and maps take theirs from here, and maps' tests check them against the compiled
// forwarder.
package layout

const (
	// MaxBackendIDs bounds the backends of one forwarder: ring slots hold 16-bit ids (1..65535).
	MaxBackendIDs = 1 << 16
	// MaxRingSlots bounds max VIPs x ring size: a slot's index is a __u32 in the program.
	MaxRingSlots = 1 << 31
	// QUICLBMaxServerIDLen is the longest QUIC-LB server ID the forwarder reads, in bytes
	// (QUIC_LB_SID_MAX in bpf/include/quic.h).
	QUICLBMaxServerIDLen = 4
	// QUICLBMaxConfigID is the largest QUIC-LB config rotation value: 7 marks connection IDs
	// that cannot be routed by their server ID.
	QUICLBMaxConfigID = 6
	// QUICKatranMaxServerID is the largest server ID of Katran's scheme (version 3: 32 bits;
	// 0 means none).
	QUICKatranMaxServerID = 1<<32 - 1
)

// The DDoS guard's limits (bpf/include/guard.h, enum guard_sizes).
const (
	// GuardRulesMax is how many rules each of the guard's tries (allow, deny) holds.
	GuardRulesMax = 4096
	// GuardScopeGlobal is the scope of a global rule; no VIP id may take it.
	GuardScopeGlobal = 0xffff
)
