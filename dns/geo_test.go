package dns

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// geoNet is one network of a test database: a City record (country, continent, coordinates)
// or an ASN record (asn set).
type geoNet struct {
	cidr, country, continent string
	lat, lon                 float64
	asn                      uint32
}

// writeMMDB builds a MaxMind DB file with mmdbwriter (IPv4 tree; 10/8 is reserved, so allowed
// explicitly) and writes it to path by rename, as a database update would.
func writeMMDB(t *testing.T, path, dbType string, nets []geoNet) {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: dbType, IPVersion: 4, RecordSize: 24,
		IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		_, ipn, err := net.ParseCIDR(n.cidr)
		if err != nil {
			t.Fatal(err)
		}
		rec := mmdbtype.Map{}
		if n.asn != 0 {
			rec["autonomous_system_number"] = mmdbtype.Uint32(n.asn)
		} else {
			rec["country"] = mmdbtype.Map{"iso_code": mmdbtype.String(n.country)}
			rec["continent"] = mmdbtype.Map{"code": mmdbtype.String(n.continent)}
			rec["location"] = mmdbtype.Map{"latitude": mmdbtype.Float64(n.lat), "longitude": mmdbtype.Float64(n.lon)}
		}
		if err := tree.Insert(ipn, rec); err != nil {
			t.Fatal(err)
		}
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

var cityNets = []geoNet{
	{cidr: "10.20.0.0/16", country: "DE", continent: "EU", lat: 50.11, lon: 8.68},
	{cidr: "10.30.0.0/16", country: "US", continent: "NA", lat: 40.71, lon: -74.0},
	{cidr: "10.40.0.0/16", country: "JP", continent: "AS", lat: 35.68, lon: 139.69},
	{cidr: "10.50.0.0/16", country: "FR", continent: "EU", lat: 48.86, lon: 2.35},
}

const geoYAML = `geo: {database: city.mmdb, asn_database: asn.mmdb, check_interval: 50ms}
groups:
  eu: ["continent:EU"]
  isp: ["asn:64500"]
  lab: [10.20.9.0/24]
zones:
  - origin: example.com.
    soa: {ns: ns1, mbox: hostmaster, serial: 1}
    records: ["@ NS ns1", "ns1 A 192.0.2.53"]
    names:
      - name: app
        ttl: 30
        policy: geolocation
        geo: {eu: [fra], isp: [nyc], lab: [tyo], default: [fra]}
        sites:
          - {name: fra, addresses: [198.51.100.1], coordinates: [50.1, 8.7]}
          - {name: nyc, addresses: [198.51.100.2], coordinates: [40.7, -74.0]}
          - {name: tyo, addresses: [198.51.100.3], coordinates: [35.7, 139.7]}
`

// geoAsk asks app.example.com with an ECS subnet and returns the site answered and the scope.
func geoAsk(t *testing.T, srv *Server, subnet string) (string, uint8) {
	t.Helper()
	r, _, err := Query(context.Background(), srv.Addr().String(), "app.example.com", mdns.TypeA, QueryOptions{Subnet: subnet})
	if err != nil {
		t.Fatal(err)
	}
	var scope uint8
	if o := r.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*mdns.EDNS0_SUBNET); ok {
				scope = s.SourceScope
			}
		}
	}
	if len(r.Answer) != 1 {
		t.Fatalf("%s: answer %v", subnet, r.Answer)
	}
	return map[string]string{"198.51.100.1": "fra", "198.51.100.2": "nyc", "198.51.100.3": "tyo"}[r.Answer[0].(*mdns.A).A.String()], scope
}

// Groups by continent (City database), by ASN (ASN database) and by subnet (the table, which
// wins), nearest site by coordinates for located clients of no group, the default for the
// rest; the ECS scope is the database network's prefix (the longer of the two databases); a
// changed file is reloaded, a bad one refused with the old one serving.
func TestGeoIPDatabase(t *testing.T) {
	dir := t.TempDir()
	writeMMDB(t, filepath.Join(dir, "city.mmdb"), "GeoLite2-City", cityNets)
	writeMMDB(t, filepath.Join(dir, "asn.mmdb"), "GeoLite2-ASN", []geoNet{{cidr: "10.30.0.0/16", asn: 64999}, {cidr: "10.30.5.0/24", asn: 64500}})
	cfgPath := filepath.Join(dir, "dns.yaml")
	if err := os.WriteFile(cfgPath, []byte("listen: 127.0.0.1:0\n"+geoYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServerFile(t, cfgPath)
	for _, c := range []struct {
		subnet, site string
		scope        uint8
	}{
		{"10.50.1.0/24", "fra", 16}, // continent EU
		{"10.20.1.0/24", "fra", 24}, // EU too, but the table splits its /16: no wider than the source
		{"10.20.9.0/24", "tyo", 24}, // the subnet table wins over the database
		{"10.30.5.0/24", "nyc", 24}, // asn 64500, in a /24 of the ASN database
		{"10.30.6.0/24", "nyc", 23}, // US: no group, nearest; the ASN database holds 10.30.6.0/23
		{"10.40.1.0/24", "tyo", 16}, // JP: nearest
		{"10.99.0.0/24", "fra", 24}, // not in the database: default, the source prefix
	} {
		site, scope := geoAsk(t, srv, c.subnet)
		if site != c.site || scope != c.scope {
			t.Errorf("%s: %s scope %d, want %s scope %d", c.subnet, site, scope, c.site, c.scope)
		}
	}
	if n := gatherVec(t, srv, "switchyard_dns_policy_decisions_total", "reason", "nearest"); n != 2 {
		t.Errorf("nearest decisions %v, want 2", n)
	}

	// Japan joins Europe in a new build of the file: reloaded, and the cached answer goes stale.
	moved := append([]geoNet(nil), cityNets...)
	moved[2] = geoNet{cidr: "10.40.0.0/16", country: "JP", continent: "EU", lat: 35.68, lon: 139.69}
	time.Sleep(20 * time.Millisecond) // a new modification time even on coarse file systems
	writeMMDB(t, filepath.Join(dir, "city.mmdb"), "GeoLite2-City", moved)
	testutil.Eventually(t, 5*time.Second, func() bool { s, _ := geoAsk(t, srv, "10.40.1.0/24"); return s == "fra" },
		"the reloaded database to put 10.40.1.0/24 in eu")
	if n := gatherVec(t, srv, "switchyard_dns_geo_reloads_total", "result", "ok"); n != 1 {
		t.Errorf("reloads ok %v, want 1", n)
	}

	// A truncated file is refused: the old database serves on, the error is counted.
	if err := os.WriteFile(filepath.Join(dir, "city.mmdb"), []byte("not a database"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return gatherVec(t, srv, "switchyard_dns_geo_reloads_total", "result", "error") == 1
	}, "the bad file to be refused")
	if s, _ := geoAsk(t, srv, "10.40.2.0/24"); s != "fra" {
		t.Errorf("after a bad file: %s, want fra from the old database", s)
	}
	time.Sleep(200 * time.Millisecond)
	if n := gatherVec(t, srv, "switchyard_dns_geo_reloads_total", "result", "error"); n != 1 {
		t.Errorf("the bad file was reported %v times, want once", n)
	}
}

// startServerFile starts a server for a configuration file (relative paths from its directory).
func startServerFile(t *testing.T, path string) *Server {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return startConfig(t, cfg, Options{})
}

// gatherVec sums the series of metric name whose label has value.
func gatherVec(t *testing.T, srv *Server, name, label, value string) float64 {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// A geo selector without its database, a group entry of neither form, bad coordinates: each
// refused with the fix.
func TestGeoConfigErrors(t *testing.T) {
	base := strings.Replace(geoYAML, "geo: {database: city.mmdb, asn_database: asn.mmdb, check_interval: 50ms}\n", "", 1)
	for yml, want := range map[string]string{
		base:                               `"continent:EU" needs a City or Country database; set geo: {database: GeoLite2-City.mmdb}`,
		"geo: {database: c.mmdb}\n" + base: `"asn:64500" needs an ASN database`,
		strings.Replace(geoYAML, "continent:EU", "planet:earth", 1): `write a subnet (10.1.0.0/16, 2001:db8::/32) or country:DE`,
		strings.Replace(geoYAML, "[50.1, 8.7]", "[95, 8.7]", 1):     "field sites.fra.coordinates: [95 8.7]; write [latitude, longitude]",
		"geo: {check_interval: 5s}\n" + base:                        "field geo: no database",
	} {
		_, err := config.Parse([]byte(yml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	// A database that does not open fails the start with the path.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "city.mmdb"), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(dir, "asn.mmdb"), []byte("junk"), 0o644)
	cfg, err := config.Parse([]byte(geoYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	if _, err := NewServer(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "city.mmdb") {
		t.Errorf("junk database: %v", err)
	}
}
