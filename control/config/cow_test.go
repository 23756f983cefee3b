package config

import "testing"

// TestCloneForChange: a VIP changed through MutableVIP leaves the original configuration as it
// was; untouched VIPs share their backends (Equal without a comparison) and a changed one is not
// equal to its original.
func TestCloneForChange(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	n := c.CloneForChange()
	if !sameBackends(n.VIPs[0].Backends, c.VIPs[0].Backends) || !n.VIPs[0].Equal(c.VIPs[0]) {
		t.Fatal("an untouched VIP does not share its backends")
	}
	v := n.MutableVIP(0)
	v.Backends[0].Drained = !v.Backends[0].Drained
	v.Backends = append(v.Backends, Backend{Address: "10.9.9.9", Weight: 1})
	if v.Health != nil {
		v.Health.Rise++
	}
	if c.VIPs[0].Backends[0].Drained == v.Backends[0].Drained || len(c.VIPs[0].Backends) == len(v.Backends) {
		t.Fatal("a change through MutableVIP reached the original's backends")
	}
	if v.Health != nil && c.VIPs[0].Health.Rise == v.Health.Rise {
		t.Fatal("a change through MutableVIP reached the original's health check")
	}
	if n.VIPs[0].Equal(c.VIPs[0]) {
		t.Fatal("a changed VIP is equal to its original")
	}
	n.VIPs = append(n.VIPs, VIP{Name: "new", Address: "198.18.9.9", Port: 1})
	if len(c.VIPs) == len(n.VIPs) {
		t.Fatal("a VIP added to the copy reached the original")
	}
}
