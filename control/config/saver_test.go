package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestSaverSameBytes: the Saver's output is byte for byte Marshal's, after changes of one VIP,
// additions, removals and renames (so the cache never serves a stale VIP).
func TestSaverSameBytes(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	for i := 0; i < 50; i++ {
		v := VIP{Name: fmt.Sprintf("g%d", i), Address: fmt.Sprintf("198.18.9.%d", i+1), Port: 443, Protocol: "tcp"}
		for j := 0; j < 4; j++ {
			v.Backends = append(v.Backends, Backend{Address: fmt.Sprintf("10.0.%d.%d", i, j+1), Weight: 1})
		}
		c.VIPs = append(c.VIPs, v)
	}
	var s Saver
	check := func(what string) {
		t.Helper()
		want, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s: the saver wrote\n%s\nMarshal\n%s", what, got, want)
		}
	}
	check("first")
	check("unchanged")
	// Changes go through MutableVIP, as the daemon's do (the saver keeps the VIPs it encoded,
	// which are never changed in place).
	c.MutableVIP(7).Backends[2].Drained = true
	check("drain")
	c.MutableVIP(0).Health.Interval = Duration(7e9)
	check("health")
	c.VIPs = append(c.VIPs[:3], c.VIPs[4:]...)
	check("remove")
	c.MutableVIP(10).Name = "renamed"
	check("rename")
	v := c.MutableVIP(11)
	v.Backends = append(v.Backends, Backend{Address: "10.9.9.9", Weight: 3})
	check("backend add")
	c.BGP = nil
	c.VIPs = nil
	check("no vips")
}

// TestVIPEqualCoversEveryField: changing any field of a VIP (or of its backends and health
// check) makes Equal false, so that a field added later cannot be left out of it silently.
func TestVIPEqualCoversEveryField(t *testing.T) {
	base := VIP{Name: "a", Address: "198.18.0.1", Port: 1, Protocol: "tcp", Hash: "five-tuple",
		Health: &HealthCheck{Type: "tcp"}, Guard: &Guard{Deny: []string{"10.0.0.0/8"}}, BGP: &VIPBGP{AnnounceFrom: []string{"lb1"}}, Backends: []Backend{{Address: "10.0.0.1", Weight: 1}}}
	mutate := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint16, reflect.Uint32:
			v.SetUint(v.Uint() + 1)
		default:
			t.Fatalf("field kind %s: extend this test and VIP.Equal", v.Kind())
		}
	}
	walk := func(typ reflect.Type, set func(v *VIP, i int)) {
		for i := 0; i < typ.NumField(); i++ {
			if !typ.Field(i).IsExported() {
				continue // derived from the exported fields (the parsed addresses), not configuration
			}
			v := base.clone()
			set(&v, i)
			if base.Equal(v) {
				t.Errorf("%s.%s changed, Equal still true", typ.Name(), typ.Field(i).Name)
			}
		}
	}
	walk(reflect.TypeOf(VIP{}), func(v *VIP, i int) {
		f := reflect.ValueOf(v).Elem().Field(i)
		switch f.Kind() {
		case reflect.Pointer:
			f.Set(reflect.Zero(f.Type()))
		case reflect.Slice:
			v.Backends = append(v.Backends, Backend{})
		case reflect.Struct: // the quic block: its own fields are walked below
			v.QUIC.Enabled = true
		default:
			mutate(f)
		}
	})
	walk(reflect.TypeOf(Backend{}), func(v *VIP, i int) { mutate(reflect.ValueOf(&v.Backends[0]).Elem().Field(i)) })
	walk(reflect.TypeOf(HealthCheck{}), func(v *VIP, i int) { mutate(reflect.ValueOf(v.Health).Elem().Field(i)) })
	walk(reflect.TypeOf(QUIC{}), func(v *VIP, i int) { mutate(reflect.ValueOf(&v.QUIC).Elem().Field(i)) })
}

// TestValidateChange: a change is validated like the whole file for the VIPs it touches and for
// everything across VIPs, and the VIPs it leaves equal are not checked one by one again.
func TestValidateChange(t *testing.T) {
	prev, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	prev.ApplyDefaults()
	next := prev.Clone()
	next.VIPs[0].Backends = append(next.VIPs[0].Backends, Backend{Address: "not-an-address"})
	if err := next.ValidateChange(prev); err == nil {
		t.Fatal("a bad backend in the changed VIP passed")
	}
	next = prev.Clone()
	dup := next.VIPs[1].Clone()
	dup.Name = "other"
	next.VIPs = append(next.VIPs, dup)
	if err := next.ValidateChange(prev); err == nil {
		t.Fatal("a second VIP with the same address, port and protocol passed")
	}
	next = prev.Clone()
	next.VIPs[0].Backends[0].Weight = 5
	if err := next.ValidateChange(prev); err != nil {
		t.Fatalf("a good change refused: %v", err)
	}
}

// TestValidateChangeCountsAddresses: a change is refused when it takes the distinct backend
// addresses to max_backends, though ValidateChange counts only the addresses of the VIPs the
// change touched once the previous configuration's are known.
func TestValidateChangeCountsAddresses(t *testing.T) {
	vip := func(i int, addrs ...string) VIP {
		v := VIP{Name: fmt.Sprintf("v%d", i), Address: fmt.Sprintf("198.18.100.%d", i), Port: 80, Protocol: "tcp"}
		for _, a := range addrs {
			v.Backends = append(v.Backends, Backend{Address: a, Weight: 1})
		}
		return v
	}
	shared := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
	// 12 backends listed (more than max_backends 10), 4 distinct.
	prev := &Config{Interface: "eth0", MaxBackends: 10, VIPs: []VIP{vip(1, shared...), vip(2, shared...), vip(3, shared...)}}
	if err := prev.Validate(); err != nil {
		t.Fatal(err)
	}
	next := prev.Clone()
	next.VIPs = append(next.VIPs, vip(4, "10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5")) // 9 distinct
	if err := next.ValidateChange(prev); err != nil {
		t.Fatalf("9 distinct addresses with max_backends 10 refused: %v", err)
	}
	over := next.Clone()
	over.VIPs = append(over.VIPs, vip(5, "10.0.2.1")) // 10: one too many
	if err := over.ValidateChange(next); err == nil || !strings.Contains(err.Error(), "distinct backend addresses") {
		t.Fatalf("10 distinct addresses with max_backends 10: %v, want refused", err)
	}
	same := next.Clone()
	same.VIPs = append(same.VIPs, vip(5, "10.0.1.1", "10.0.0.1")) // listed already: still 9
	if err := same.ValidateChange(next); err != nil {
		t.Fatalf("a VIP of addresses already listed refused: %v", err)
	}
	if err := same.Clone().ValidateChange(same); err != nil {
		t.Fatalf("no change refused: %v", err)
	}
}
