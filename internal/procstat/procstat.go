// Package procstat reads the whole machine's CPU time by kind from /proc/stat, for the
// benchmarks and lab experiments that report CPU per request or per packet.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU is the machine's CPU time by kind, summed over every CPU (/proc/stat's first line):
// User (with nice), Kernel (system and hard irq), Softirq (the packet path: veth, bridge,
// routing, XDP) and Busy (everything but idle and iowait).
type CPU struct{ User, Kernel, Softirq, Busy time.Duration }

// Sub is the time spent between b and a (a taken later).
func (a CPU) Sub(b CPU) CPU {
	return CPU{a.User - b.User, a.Kernel - b.Kernel, a.Softirq - b.Softirq, a.Busy - b.Busy}
}

// ReadCPU reads /proc/stat; the values are in USER_HZ ticks (10 ms on Linux).
func ReadCPU() (CPU, error) {
	bs, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPU{}, fmt.Errorf("read machine CPU time: %w", err)
	}
	return parseCPU(string(bs))
}

func parseCPU(stat string) (CPU, error) {
	f := strings.Fields(strings.SplitN(stat, "\n", 2)[0])
	if len(f) < 9 || f[0] != "cpu" {
		return CPU{}, fmt.Errorf("read machine CPU time: /proc/stat starts with %q, not the cpu line", strings.Join(f, " "))
	}
	var v [10]time.Duration
	for i, x := range f[1:] {
		if i < len(v) {
			n, _ := strconv.ParseInt(x, 10, 64)
			v[i] = time.Duration(n) * (time.Second / 100)
		}
	}
	// user nice system idle iowait irq softirq steal guest guest_nice (guest time is already
	// counted in user).
	var c CPU
	c.User = v[0] + v[1]
	c.Kernel = v[2] + v[5]
	c.Softirq = v[6]
	c.Busy = c.User + c.Kernel + c.Softirq + v[7]
	return c, nil
}
