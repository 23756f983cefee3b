package procstat

import (
	"testing"
	"time"
)

func TestParseCPU(t *testing.T) {
	c, err := parseCPU("cpu  100 5 30 900 7 2 40 1 0 0\ncpu0 1 2 3\n")
	if err != nil {
		t.Fatal(err)
	}
	tick := 10 * time.Millisecond
	want := CPU{User: 105 * tick, Kernel: 32 * tick, Softirq: 40 * tick, Busy: 178 * tick}
	if c != want {
		t.Errorf("parsed %+v, want %+v", c, want)
	}
	if d := want.Sub(CPU{User: tick, Busy: tick}); d.User != 104*tick || d.Busy != 177*tick {
		t.Errorf("Sub: %+v", d)
	}
	if _, err := parseCPU("intr 1 2\n"); err == nil {
		t.Error("a /proc/stat without the cpu line parsed")
	}
}

func TestReadCPU(t *testing.T) {
	c, err := ReadCPU()
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	if c.Busy <= 0 {
		t.Errorf("the machine has been busy for %v", c.Busy)
	}
}
