package maps

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// mapping is the memory map of a BPF array created with BPF_F_MMAPABLE: the kernel's own pages,
// shared with the program, read and written without a syscall. It is unmapped when the Set that
// holds it is collected.
type mapping struct {
	mem []byte
}

func mmapArray(m *ebpf.Map) (*mapping, error) {
	info, err := m.Info()
	if err != nil {
		return nil, fmt.Errorf("map %s into memory: %w", m, err)
	}
	// The kernel rounds every array value up to 8 bytes; the mapping covers whole pages.
	size := int(m.MaxEntries()) * int((info.ValueSize+7)&^7)
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s into memory: %w (was it created with BPF_F_MMAPABLE?)", m, err)
	}
	mp := &mapping{mem: mem}
	runtime.AddCleanup(mp, func(b []byte) { _ = unix.Munmap(b) }, mem)
	return mp, nil
}

// mappedU32 is an mmapped array of __u32 values: one slot per 8-byte value (the kernel's
// stride). A slot is read and written with one aligned 4-byte access, so the program sees either
// the old or the new value, never a mix.
type mappedU32 struct {
	*mapping
	words []uint32 // the mapping as 4-byte words: slot i is words[2*i]
}

func mapU32(m *ebpf.Map) (mappedU32, error) {
	mp, err := mmapArray(m)
	if err != nil {
		return mappedU32{}, err
	}
	w := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(mp.mem))), len(mp.mem)/4)
	return mappedU32{mapping: mp, words: w}, nil
}

// read returns n slots from slot start on.
func (a mappedU32) read(start, n uint32) ([]uint32, error) {
	if uint64(start+n)*2 > uint64(len(a.words)) {
		return nil, fmt.Errorf("read slots %d..%d: beyond the map", start, start+n)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = atomic.LoadUint32(&a.words[2*(int(start)+i)])
	}
	return out, nil
}

// write stores v in slot i.
func (a mappedU32) write(i, v uint32) error {
	if uint64(i)*2 >= uint64(len(a.words)) {
		return fmt.Errorf("write slot %d: beyond the map", i)
	}
	atomic.StoreUint32(&a.words[2*int(i)], v)
	return nil
}

// mappedRing is an mmapped ring map (rings16, prev_rings16): struct ring_word values of four
// 16-bit slots, so that the mapping reads as one flat array of 16-bit backend ids, 2 bytes a
// slot. A slot is written with one aligned 2-byte store, which the program reads whole.
type mappedRing struct {
	*mapping
	slots []uint16
}

func mapRing(m *ebpf.Map) (mappedRing, error) {
	mp, err := mmapArray(m)
	if err != nil {
		return mappedRing{}, err
	}
	s := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(mp.mem))), len(mp.mem)/2)
	return mappedRing{mapping: mp, slots: s}, nil
}

// view returns slots start..start+n of the mapping itself (no copy): reads see the map as it is.
func (a mappedRing) view(start, n uint32) ([]uint16, error) {
	end := uint64(start) + uint64(n)
	if end > uint64(len(a.slots)) {
		return nil, fmt.Errorf("slots %d..%d beyond the map", start, end)
	}
	return a.slots[start:end:end], nil
}
