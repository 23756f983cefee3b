package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
)

// TestRingSlotsOverPins: a start over pinned ring maps keeps their size while they hold the
// VIPs, and is refused naming ring_slots and `lb detach` when the VIPs need more or ring_slots
// asks for another size.
func TestRingSlotsOverPins(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.XDP)
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/ringslots-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	if err := loader.EnsureBPFFS(pin); err != nil {
		t.Skip(err)
	}
	f, err := loader.LoadForwarder(loader.Options{PinDir: pin, MaxVIPs: 4, RingSize: 101, RingSlots: 2000, MaxBackends: 64, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg := &config.Config{Interface: "eth0", PinDir: pin, MaxVIPs: 4}
	for i := 0; i < 2; i++ {
		v := config.VIP{Address: fmt.Sprintf("198.18.0.%d", i+1), Port: 80}
		for j := 0; j < 16; j++ {
			v.Backends = append(v.Backends, config.Backend{Address: fmt.Sprintf("10.0.%d.%d", i, j+1)})
		}
		cfg.VIPs = append(cfg.VIPs, v)
	}
	if _, err := ringSlots(cfg); err == nil || !strings.Contains(err.Error(), "hold 2000 slots, the VIPs' rings need 3202") || !strings.Contains(err.Error(), "lb detach") {
		t.Fatalf("VIPs that need more than the pins hold: %v", err)
	}
	cfg.VIPs = cfg.VIPs[:1]
	if n, err := ringSlots(cfg); err != nil || n != 2000 {
		t.Fatalf("VIPs that fit the pins: %d %v, want the pinned 2000", n, err)
	}
	cfg.RingSlots = 4000
	if _, err := ringSlots(cfg); err == nil || !strings.Contains(err.Error(), "ring_slots 4000, the ring maps pinned") {
		t.Fatalf("ring_slots other than the pins': %v", err)
	}
	cfg.RingSlots = 2000
	if n, err := ringSlots(cfg); err != nil || n != 2000 {
		t.Fatalf("ring_slots as pinned: %d %v", n, err)
	}
}
