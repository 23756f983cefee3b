package maps

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
)

// mappedU32 is a BPF array of __u32 created with BPF_F_MMAPABLE, read and written through its
// memory map: a range is read with one copy and a slot written with one aligned 4-byte store, so
// the forwarder sees either the old or the new value, never a mix, and no syscall is made per
// slot.
type mappedU32 struct {
	mem *ebpf.Memory
}

// slotStride is the distance between two slots: the kernel rounds array values up to 8 bytes.
const slotStride = 8

func mapU32(m *ebpf.Map) (mappedU32, error) {
	mem, err := m.Memory()
	if err != nil {
		return mappedU32{}, fmt.Errorf("map %s into memory: %w", m, err)
	}
	return mappedU32{mem: mem}, nil
}

// read returns n slots from slot start on.
func (a mappedU32) read(start, n uint32) ([]uint32, error) {
	buf := make([]byte, slotStride*int(n))
	if _, err := a.mem.ReadAt(buf, int64(start)*slotStride); err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.NativeEndian.Uint32(buf[slotStride*i:])
	}
	return out, nil
}

// write stores v in slot i.
func (a mappedU32) write(i, v uint32) error {
	var word [4]byte
	binary.NativeEndian.PutUint32(word[:], v)
	_, err := a.mem.WriteAt(word[:], int64(i)*slotStride)
	return err
}
