package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/loader"
)

// TestL4QUICServerIDs: the daemon gives every backend of a QUIC VIP its server ID (its backend
// id, or its server_id) in the forwarder's quic_servers map, keeps the map in step with backend
// add and remove, shows the IDs in `backend list`, and puts the scheme in the VIP's flags.
func TestL4QUICServerIDs(t *testing.T) {
	l := newL4Lab(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/quic-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	cfgPath := filepath.Join(dir, "lb.yaml")
	cfgText := fmt.Sprintf(`interface: %s
pin_dir: %s
socket: %s
ring_size: %d
max_vips: 8
max_backends: 64
conn_table_size: 4096
vips:
  - name: h3
    address: 198.18.100.1
    port: 443
    protocol: udp
    quic: {enabled: true, server_id_len: 1, config_id: 2}
    backends:
      - {address: 198.18.3.1}
      - {address: 198.18.3.2}
  - name: h3k
    address: 198.18.100.2
    port: 443
    protocol: udp
    quic: {enabled: true, scheme: katran}
    backends:
      - {address: 198.18.3.7, server_id: 40000}
`, l.iface, pin, sock, l4TestRing)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startL4Daemon(t, l, sock, "--config", cfgPath)
	S := []string{"--socket", sock}
	s := openPinned(t, pin)
	check := func(what string, want map[uint32]uint32) {
		t.Helper()
		got, err := s.QUICServers()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: quic_servers %v, want %v\n%s", what, got, want, d.log)
		}
	}
	ids := backendIDs(t, s)
	b1, b2, b7 := ids["198.18.3.1"], ids["198.18.3.2"], ids["198.18.3.7"]
	check("start", map[uint32]uint32{b1: b1, b2: b2, 40000: b7})
	vips, err := s.VIPs()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vips {
		if f := v.Flags; !f.QUIC() || (v.Key.Addr.String() == "198.18.100.1" && (f.QUICServerIDLen() != 1 || f.QUICConfigID() != 2)) {
			t.Fatalf("vip %s flags %#x", v.Key, uint32(f))
		}
	}
	var bl []api.BackendInfo
	runL4JSON(t, &bl, append([]string{"backend", "list"}, S...)...)
	if findBackendInfo(bl, "h3", "198.18.3.2").ServerID != b2 || findBackendInfo(bl, "h3k", "198.18.3.7").ServerID != 40000 {
		t.Fatalf("backend list: %+v", bl)
	}
	if out, _ := runL4CLI(t, append([]string{"backend", "list"}, S...)...); !strings.Contains(out, "QUIC SERVER ID") || !strings.Contains(out, "40000") {
		t.Fatalf("backend list table:\n%s", out)
	}
	if _, err := runL4CLI(t, append([]string{"backend", "add", "h3", "198.18.3.3"}, S...)...); err != nil {
		t.Fatal(err)
	}
	b3 := backendIDs(t, s)["198.18.3.3"]
	check("backend add", map[uint32]uint32{b1: b1, b2: b2, b3: b3, 40000: b7})
	if _, err := runL4CLI(t, append([]string{"backend", "remove", "h3", "198.18.3.1"}, S...)...); err != nil {
		t.Fatal(err)
	}
	check("backend remove", map[uint32]uint32{b2: b2, b3: b3, 40000: b7})
	// --server-id on backend add: the configured ID; a bad one is refused with the field.
	if _, err := runL4CLI(t, append([]string{"backend", "add", "h3k", "198.18.3.8", "--server-id", "40001"}, S...)...); err != nil {
		t.Fatal(err)
	}
	b8 := backendIDs(t, s)["198.18.3.8"]
	check("backend add --server-id", map[uint32]uint32{b2: b2, b3: b3, 40000: b7, 40001: b8})
	if out, err := runL4CLI(t, append([]string{"backend", "add", "h3k", "198.18.3.9", "--server-id", "40000"}, S...)...); err == nil || !strings.Contains(out+err.Error(), "server_id 40000 is also 198.18.3.7's") {
		t.Fatalf("a server id used twice: %v\n%s", err, out)
	}
	if out, err := runL4CLI(t, append([]string{"backend", "add", "h3", "198.18.3.9", "--server-id", "300"}, S...)...); err == nil || !strings.Contains(out+err.Error(), "300 does not fit the VIP's 1-byte server IDs") {
		t.Fatalf("a server id too large: %v\n%s", err, out)
	}
	// --quic on vip add: the scheme, length and config id in the VIP's flags.
	if _, err := runL4CLI(t, append([]string{"vip", "add", "h3b", "198.18.100.3:443", "--protocol", "udp", "--quic", "quic-lb:3:5", "--backend", "198.18.3.4"}, S...)...); err != nil {
		t.Fatal(err)
	}
	vips, _ = s.VIPs()
	found := false
	for _, v := range vips {
		if v.Key.Addr.String() == "198.18.100.3" {
			found = v.Flags.QUIC() && v.Flags.QUICServerIDLen() == 3 && v.Flags.QUICConfigID() == 5
		}
	}
	if !found {
		t.Fatalf("vip add --quic quic-lb:3:5: vips %+v", vips)
	}
	if out, err := runL4CLI(t, append([]string{"vip", "add", "h3c", "198.18.100.4:443", "--quic", "katran"}, S...)...); err == nil || !strings.Contains(out+err.Error(), "--quic needs --protocol udp") {
		t.Fatalf("vip add --quic over tcp: %v\n%s", err, out)
	}
	var fi api.FlowInfo
	runL4JSON(t, &fi, append([]string{"lb", "flow", "udp", "198.18.0.5:40000", "198.18.100.1:443"}, S...)...)
	if fi.Reason != "maglev slot" || !strings.Contains(fi.Note, "connection ID carries a known server ID") {
		t.Fatalf("lb flow of a QUIC VIP: %+v", fi)
	}
	var st api.Stats
	runL4JSON(t, &st, append([]string{"lb", "stats"}, S...)...)
	if _, ok := st.Counters["quic_cid_routed"]; !ok {
		t.Fatalf("stats lack the quic counters: %v", st.Counters)
	}
}
