package maps

import (
	"math/bits"

	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// flowHashSeed is FLOW_HASH_SEED of bpf/include/consts.h, generated into loader.
const flowHashSeed = uint32(bpfobj.LBFlowHashFLOW_HASH_SEED)

func mm3Mix(h, k uint32) uint32 {
	k *= 0xcc9e2d51
	k = bits.RotateLeft32(k, 15)
	k *= 0x1b873593
	h ^= k
	h = bits.RotateLeft32(h, 13)
	return h*5 + 0xe6546b64
}

func mm3Fmix(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// FlowHash is the forwarder's flow hash (flow_hash in bpf/include/hash.h), so that the control
// plane can tell which Maglev slot a flow maps to.
func FlowHash(f Flow, flags VIPFlags) uint32 {
	k := FlowKey(f)
	h := uint32(flowHashSeed)
	for _, w := range k.Src {
		h = mm3Mix(h, w)
	}
	if flags&HashSrcOnly == 0 {
		for _, w := range k.Dst {
			h = mm3Mix(h, w)
		}
		sport := uint32(k.Sport)
		if flags&NoSrcPort != 0 {
			sport = 0
		}
		h = mm3Mix(h, sport<<16|uint32(k.Dport))
		h = mm3Mix(h, uint32(k.Proto))
	}
	return mm3Fmix(h ^ 40)
}

// Slot is the index in a VIP's ring of ringSize slots that a new flow maps to.
func Slot(f Flow, flags VIPFlags, ringSize uint32) uint32 {
	return FlowHash(f, flags) % ringSize
}

// vipFilterSlots is VIP_FILTER_SLOTS of bpf/include/consts.h, generated into loader.
const vipFilterSlots = uint32(bpfobj.LBVipFilterSizeVIP_FILTER_SLOTS)

// vipAddrSlot is vip_slot_xor in bpf/include/hash.h (of the XOR of the address words).
func vipAddrSlot(w [4]uint32) uint32 {
	return mm3Fmix(w[0]^w[1]^w[2]^w[3]^flowHashSeed) & (vipFilterSlots - 1)
}
