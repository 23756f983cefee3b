package dns

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/keyroll"
	"github.com/switchyard/switchyard/dns/keystore"
	"github.com/switchyard/switchyard/internal/testutil"
)

// fleetPorts are the ports of the key fleet's and the BIND XoT tests' servers;
// SWITCHYARD_TEST_FLEET_PORTS=FIRST-LAST replaces them, as SWITCHYARD_TEST_ETCD_PORTS does
// etcd's, so that several people's runs on one machine each keep to their own ports.
var fleetPorts = envPortRange("SWITCHYARD_TEST_FLEET_PORTS", 47500, 47549)

// envPortRange is the range in the environment variable env (FIRST-LAST), else first-last.
func envPortRange(env string, first, last int) *portRange {
	if v := os.Getenv(env); v != "" {
		if _, err := fmt.Sscanf(v, "%d-%d", &first, &last); err != nil || first < 1024 || last < first || last > 65535 {
			panic(fmt.Sprintf("%s=%q: give FIRST-LAST, e.g. 47500-47549", env, v))
		}
	}
	return &portRange{first: first, last: last}
}

// fleetYAML is a KSK/ZSK policy zone whose keys live in the etcd store at endpoint, with the
// rollover walks' short intervals: a ZSK successor is made 7m after the first ZSK signs,
// published at 8m, signs at 10m (Ipub 2m) and the old one leaves 6m later (IretZSK).
func fleetYAML(endpoint, keyFile string) string {
	return fleetZonesYAML(endpoint+"/switchyard/test", keyFile, "example.org.")
}

// fleetZonesYAML is fleetYAML's zone for each origin, in the store at endpointPrefix.
func fleetZonesYAML(endpointPrefix, keyFile string, origins ...string) string {
	y := "store: etcd://" + endpointPrefix + "\nstore_key_file: " + keyFile + "\nzones:\n"
	for _, o := range origins {
		y += strings.Replace(fleetZone, "example.org.", o, 1)
	}
	return y
}

const fleetZone = `  - origin: example.org.
    dnssec:
      dnskey_ttl: 60
      refresh: 1m
      validity: 2h
      policy: {scheme: ksk_zsk, algorithm: 13, zsk_lifetime: 10m, ksk_lifetime: 1000h, propagation_delay: 1m, zone_max_ttl: 300, parent_ds_ttl: 60}
    records:
      - "@ SOA ns1 hostmaster 1 3600 600 604800 60"
      - "@ NS ns1"
      - "ns1 A 127.0.0.1"
      - "www 300 A 192.0.2.1"
`

// fleetNode starts a DNS server of the fleet on a port of fleetPorts; its log goes to the test
// and to logs.
func fleetNode(t *testing.T, yml string, logs *testutil.SyncBuffer) (*Server, error) {
	t.Helper()
	return fleetNodeIn(t, yml, t.TempDir(), logs)
}

// fleetNodeIn is fleetNode with its configuration (and state) directory dir.
func fleetNodeIn(t *testing.T, yml, dir string, logs *testutil.SyncBuffer) (*Server, error) {
	t.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Dir = fmt.Sprintf("127.0.0.1:%d", fleetPorts.free(t)), dir
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), nil))
	srv, err := NewServer(cfg, Options{Logger: log, KeyStore: keystore.Options{OpTimeout: 2 * time.Second, LockTTL: 2 * time.Second}})
	if err != nil {
		return nil, err
	}
	startBuilt(t, srv)
	return srv, nil
}

// storeKeyFile writes a new random store_key_file and returns its path.
func storeKeyFile(t *testing.T) string {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "store.key")
	secret := make([]byte, 32)
	rand.Read(secret)
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

// storedState reads zone's key state from the etcd store at endpointPrefix, as a node with
// keyFile would.
func storedState(t *testing.T, endpointPrefix, keyFile, zone string) *keyroll.State {
	t.Helper()
	reader, err := keystore.Open("etcd://"+endpointPrefix, keyFile, slog.New(slog.DiscardHandler), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	st, err := reader.Load(zone)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rrTags are the key tags of the DNSKEYs and of the RRSIGs over name's qtype that srv answers.
func rrTags(t *testing.T, srv *Server, name string, qtype uint16) (keys, sigs []uint16) {
	t.Helper()
	for _, rr := range exchange(t, srv, doQuery(name, qtype, false), true).Answer {
		switch r := rr.(type) {
		case *mdns.DNSKEY:
			keys = append(keys, r.KeyTag())
		case *mdns.RRSIG:
			if r.TypeCovered == qtype {
				sigs = append(sigs, r.KeyTag)
			}
		}
	}
	slices.Sort(keys)
	slices.Sort(sigs)
	return keys, sigs
}

// TestKeysFleetEtcd: two DNS servers take a policy zone's keys from one etcd store. The first
// generates them, the second loads them: both publish the same DNSKEYs and sign with the same
// ZSK. A ZSK rollover that the first advances (the second's own key loop held) reaches the
// second through the store's watch; with etcd gone, a node still rolls by the timestamps it
// has, signing with its last keys, and logs why. The private keys in etcd are sealed, and a
// node with another key file is refused.
func TestKeysFleetEtcd(t *testing.T) {
	e := testutil.StartEtcd(t)
	keyFile := storeKeyFile(t)
	yml := fleetYAML(e.Endpoint, keyFile)
	var logA, logB testutil.SyncBuffer
	a, err := fleetNode(t, yml, &logA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fleetNode(t, yml, &logB)
	if err != nil {
		t.Fatal(err)
	}
	skew := func(d time.Duration) {
		a.skew.Store(int64(d))
		b.skew.Store(int64(d))
	}
	same := func(step string, wantKeys, wantSigs int) (keys, sigs []uint16) {
		t.Helper()
		keys, _ = rrTags(t, a, "example.org.", mdns.TypeDNSKEY)
		_, sigs = rrTags(t, a, "www.example.org.", mdns.TypeA)
		keysB, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
		_, sigsB := rrTags(t, b, "www.example.org.", mdns.TypeA)
		if !slices.Equal(keys, keysB) || !slices.Equal(sigs, sigsB) {
			t.Fatalf("%s: node a publishes %v and signs www with %v, node b %v and %v", step, keys, sigs, keysB, sigsB)
		}
		if len(keys) != wantKeys || len(sigs) != wantSigs {
			t.Fatalf("%s: DNSKEYs %v and www signed by %v, want %d and %d", step, keys, sigs, wantKeys, wantSigs)
		}
		t.Logf("%s: both publish %v and sign www with %v", step, keys, sigs)
		return keys, sigs
	}
	_, first := same("start", 2, 1)

	// Sealed at rest: no private key is readable in etcd.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(t.Context(), "/switchyard/test/dnssec/data/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 3 { // the state and two keys
		t.Fatalf("%d values in the store, want the state and 2 keys", len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), "PrivateKey") || strings.Contains(string(kv.Value), "DNSKEY") {
			t.Fatalf("%s is stored in the clear: %.80q", kv.Key, kv.Value)
		}
	}
	other := storeKeyFile(t)
	var logC testutil.SyncBuffer
	if _, err := fleetNode(t, fleetYAML(e.Endpoint, other), &logC); err == nil || !strings.Contains(err.Error(), "store_key_file is not the key") {
		t.Fatalf("a node with another store_key_file: %v, want it refused naming store_key_file", err)
	}

	// The successor ZSK, generated and published by a; b's own key loop cannot run, so only
	// the watch can bring it.
	b.keys.mu.Lock()
	skew(8*time.Minute + 30*time.Second)
	if err := a.keyRound(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		keys, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
		if len(keys) == 3 {
			break
		}
		if time.Now().After(deadline) {
			b.keys.mu.Unlock()
			t.Fatalf("node b still publishes %v 15s after node a published a new ZSK", keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.keys.mu.Unlock()
	same("successor published", 3, 1)

	// The successor signs on both.
	skew(10*time.Minute + 40*time.Second)
	for _, n := range []*Server{a, b} {
		if err := n.keyRound(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	_, second := same("successor active", 3, 1)
	if slices.Equal(first, second) {
		t.Fatalf("www is still signed by %v after the ZSK rollover", first)
	}
	if st := storedState(t, e.Endpoint+"/switchyard/test", keyFile, "example.org."); len(st.Keys) != 3 {
		t.Fatalf("the store holds %d keys, want 3 (KSK, ZSK, one successor): %+v", len(st.Keys), st.Keys)
	}
	if n := strings.Count(logB.String(), "dns dnssec keys scheduled"); n != 0 {
		t.Fatalf("node b generated or scheduled keys %d times; it should only load node a's", n)
	}

	// etcd gone: the old ZSK leaves by its timestamp, the successor goes on signing.
	e.Stop()
	skew(16*time.Minute + 40*time.Second)
	if err := b.keyRound(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys, sigs := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
	_, sigs = rrTags(t, b, "www.example.org.", mdns.TypeA)
	if len(keys) != 2 || !slices.Equal(sigs, second) || slices.Contains(keys, first[0]) {
		t.Fatalf("without etcd node b publishes %v and signs www with %v; want the old ZSK %v gone and %v signing", keys, sigs, first, second)
	}
	for _, want := range []string{"dns dnssec keys not advanced: the key store cannot be locked", "dns dnssec key store unreachable"} {
		if !strings.Contains(logB.String(), want) {
			t.Errorf("node b's log without etcd lacks %q", want)
		}
	}
}

// TestKeysFleetFirstStart: two servers started at once on an empty store, four policy zones
// each: every zone's keys are generated once (the zone's etcd lock), so both publish the same
// DNSKEYs and the store holds one KSK and one ZSK per zone.
func TestKeysFleetFirstStart(t *testing.T) {
	e := testutil.StartEtcd(t)
	keyFile := storeKeyFile(t)
	origins := []string{"a.example.", "b.example.", "c.example.", "d.example."}
	yml := fleetZonesYAML(e.Endpoint+"/switchyard/race", keyFile, origins...)
	nodes := make([]*Server, 2)
	errs := make(chan error, 2)
	var logs [2]testutil.SyncBuffer
	for i := range nodes {
		go func() {
			var err error
			nodes[i], err = fleetNode(t, yml, &logs[i])
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	reader, err := keystore.Open("etcd://"+e.Endpoint+"/switchyard/race", keyFile, slog.New(slog.DiscardHandler), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	for _, o := range origins {
		a, _ := rrTags(t, nodes[0], o, mdns.TypeDNSKEY)
		b, _ := rrTags(t, nodes[1], o, mdns.TypeDNSKEY)
		st, err := reader.Load(o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, b) || len(a) != 2 || len(st.Keys) != 2 {
			t.Errorf("%s: node a publishes %v, node b %v, the store holds %d keys; want the same 2", o, a, b, len(st.Keys))
		}
	}
}

// TestKeysFleetRestartWithoutEtcd: a node restarted while etcd is down signs with the keys it
// cached (sealed) in its state directory in its last run: the same DNSKEYs, the same ZSK, and
// nothing readable in the cache; a node that never reached etcd fails its start, naming why.
func TestKeysFleetRestartWithoutEtcd(t *testing.T) {
	e := testutil.StartEtcd(t)
	keyFile := storeKeyFile(t)
	yml := fleetYAML(e.Endpoint, keyFile)
	dir := t.TempDir()
	var logs testutil.SyncBuffer
	a, err := fleetNodeIn(t, yml, dir, &logs)
	if err != nil {
		t.Fatal(err)
	}
	keys, sigs := rrTags(t, a, "www.example.org.", mdns.TypeA)
	dnskeys, _ := rrTags(t, a, "example.org.", mdns.TypeDNSKEY)
	if len(dnskeys) != 2 || len(sigs) != 1 || len(keys) != 0 {
		t.Fatalf("first run: DNSKEYs %v, www signed by %v", dnskeys, sigs)
	}
	a.Close()
	e.Stop()

	b, err := fleetNodeIn(t, yml, dir, &logs)
	if err != nil {
		t.Fatalf("restart with etcd down: %v", err)
	}
	defer b.Close()
	gotKeys, _ := rrTags(t, b, "example.org.", mdns.TypeDNSKEY)
	_, gotSigs := rrTags(t, b, "www.example.org.", mdns.TypeA)
	if !slices.Equal(gotKeys, dnskeys) || !slices.Equal(gotSigs, sigs) {
		t.Errorf("restart with etcd down: DNSKEYs %v signed by %v, want %v signed by %v", gotKeys, gotSigs, dnskeys, sigs)
	}
	if !strings.Contains(logs.String(), "signing with the keys this node cached") {
		t.Errorf("no log line says the cached keys sign:\n%s", logs.String())
	}
	cache, _ := os.ReadDir(filepath.Join(dir, "dnssec-store"))
	if len(cache) != 3 { // the state and two key files
		t.Errorf("cache holds %d files, want 3", len(cache))
	}
	for _, f := range cache {
		raw, _ := os.ReadFile(filepath.Join(dir, "dnssec-store", f.Name()))
		if strings.Contains(string(raw), "PrivateKey") || strings.Contains(string(raw), "example.org") {
			t.Errorf("cache file %s is readable without the store key", f.Name())
		}
	}

	if _, err := fleetNodeIn(t, yml, t.TempDir(), &logs); err == nil || !strings.Contains(err.Error(), "no copy of the fleet's keys") {
		t.Errorf("a new node with etcd down: %v, want the start refused naming etcd", err)
	}
}

// TestKeysFleetFirstStartWithoutEtcd: a node that never reached etcd and has no cached copy of
// the fleet's keys, started while etcd is stopped or does not answer, refuses to start within
// the store's timeouts, naming the zone, etcd and both fixes; it generates no key (nothing in
// its cache, nothing in etcd once it is back). The fix it names works: with another node's
// dnssec-store copied into its state directory it starts, etcd still down, and serves the
// fleet's DNSKEYs.
func TestKeysFleetFirstStartWithoutEtcd(t *testing.T) {
	e := testutil.StartEtcd(t)
	keyFile := storeKeyFile(t)
	var logs testutil.SyncBuffer
	dirA := t.TempDir()
	a, err := fleetNodeIn(t, fleetYAML(e.Endpoint, keyFile), dirA, &logs)
	if err != nil {
		t.Fatal(err)
	}
	fleetKeys, _ := rrTags(t, a, "example.org.", mdns.TypeDNSKEY)
	a.Close()
	e.Stop()

	// A port that accepts connections and never answers: etcd unreachable, not refused.
	silent, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", fleetPorts.free(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn // open and unanswered until the listener closes
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, c := range []struct{ name, endpoint string }{{"stopped", e.Endpoint}, {"silent", silent.Addr().String()}} {
		dir := t.TempDir()
		start := time.Now()
		_, err := fleetNodeIn(t, fleetYAML(c.endpoint, keyFile), dir, &logs)
		took := time.Since(start)
		t.Logf("etcd %s: a new node's start fails after %s: %v", c.name, took.Round(time.Millisecond), err)
		for _, want := range []string{"example.org.", "etcd", "no copy of the fleet's keys", "start it once etcd answers",
			"copy " + filepath.Join(dir, "dnssec-store") + " from another node", "generates none"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("etcd %s, a new node: %v; want the start refused saying %q", c.name, err, want)
			}
		}
		if took > 3*2*time.Second { // the lock's and the read's timeouts, and some slack
			t.Errorf("etcd %s: the start took %s to fail", c.name, took)
		}
		if files, _ := os.ReadDir(filepath.Join(dir, "dnssec-store")); len(files) != 0 {
			t.Errorf("etcd %s: the refused node wrote %d files to its cache", c.name, len(files))
		}
	}

	dirC := t.TempDir()
	if err := os.CopyFS(filepath.Join(dirC, "dnssec-store"), os.DirFS(filepath.Join(dirA, "dnssec-store"))); err != nil {
		t.Fatal(err)
	}
	c, err := fleetNodeIn(t, fleetYAML(e.Endpoint, keyFile), dirC, &logs)
	if err != nil {
		t.Fatalf("a new node with another node's dnssec-store, etcd down: %v", err)
	}
	defer c.Close()
	if got, _ := rrTags(t, c, "example.org.", mdns.TypeDNSKEY); !slices.Equal(got, fleetKeys) {
		t.Errorf("a new node from another node's cache publishes %v, the fleet %v", got, fleetKeys)
	}

	e.Start(t)
	if st := storedState(t, e.Endpoint+"/switchyard/test", keyFile, "example.org."); len(st.Keys) != 2 {
		t.Errorf("etcd holds %d keys after the refused starts, want the fleet's 2: %+v", len(st.Keys), st.Keys)
	}
}

// TestKeysFleetAlgorithmRolloverReversal: node a of two moves a zone to algorithm 15; node b,
// whose configuration still has 13, reloads on the watch and neither reverses the rollover nor
// starts another (its reload is refused and it keeps its keys until its configuration is
// changed too); a node started with 13 is refused. Node a, changed back to 13, reverses it.
func TestKeysFleetAlgorithmRolloverReversal(t *testing.T) {
	e := testutil.StartEtcd(t)
	keyFile := storeKeyFile(t)
	yml13 := fleetYAML(e.Endpoint, keyFile)
	yml15 := strings.Replace(yml13, "algorithm: 13", "algorithm: 15", 1)
	var logA, logB testutil.SyncBuffer
	a, err := fleetNode(t, yml13, &logA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fleetNode(t, yml13, &logB)
	if err != nil {
		t.Fatal(err)
	}
	if err := reloadChild(t, a, yml15); err != nil {
		t.Fatalf("node a to algorithm 15: %v", err)
	}
	const refusal = "but this server did not run algorithm 15"
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logB.String(), refusal) {
		if time.Now().After(deadline) {
			t.Fatalf("node b did not reload on node a's rollover in 15s:\n%s", logB.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	rolling := func(step string, wantReverted bool) {
		t.Helper()
		st := storedState(t, e.Endpoint+"/switchyard/test", keyFile, "example.org.")
		reverted := 0
		for _, k := range st.Keys {
			if !k.Reverted.IsZero() {
				reverted++
			}
		}
		if len(st.Keys) != 4 || (reverted == 2) != wantReverted || reverted%2 != 0 {
			t.Fatalf("%s: the store holds %d keys, %d reverted; want the 4 keys of one rollover, reverted %v: %+v", step, len(st.Keys), reverted, wantReverted, st.Keys)
		}
	}
	rolling("node b reloaded with algorithm 13", false)
	if _, err := fleetNode(t, yml13, &logB); err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("a node started with algorithm 13 in the rollover: %v, want it refused", err)
	}
	rolling("a node started with algorithm 13", false)

	if err := reloadChild(t, a, yml13); err != nil {
		t.Fatalf("node a back to algorithm 13: %v", err)
	}
	rolling("node a back to algorithm 13", true)
	// Node b follows the reversal through the watch: the new keys are gone from both.
	deadline = time.Now().Add(15 * time.Second)
	_, sigsA := rrTags(t, a, "www.example.org.", mdns.TypeA)
	for {
		_, sigsB := rrTags(t, b, "www.example.org.", mdns.TypeA)
		if len(sigsA) == 1 && slices.Equal(sigsA, sigsB) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reversal node a signs www with %v, node b with %v; want the one old ZSK on both", sigsA, sigsB)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
