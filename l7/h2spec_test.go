package l7

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// h2specCases is how many cases h2spec v2.2.1 (pinned in testdata/h2spec/go.mod) runs without
// -S (its strict cases); every one of them must pass on each HTTP/2 listener kind.
const h2specCases = 145

// TestH2Spec runs h2spec, the public HTTP/2 conformance suite, against the proxy on an h2c
// listener (prior knowledge, through the HTTP/1.1 engines' hand-over) and on a TLS listener
// (ALPN h2), in front of a trivial backend. It fails naming every case that did not pass.
func TestH2Spec(t *testing.T) {
	bin := buildH2Spec(t)
	b := startBackend(t, "b", nil)
	for _, e := range h2Engines {
		p := e.start(t, oneRoute("", b.addr))
		t.Run(e.name, func(t *testing.T) {
			// The two runs are independent connections to two proxies: in parallel they fit
			// the time budget even when a case waits out h2spec's timeout.
			t.Parallel()
			runH2Spec(t, bin, p.addr, e.tls)
		})
	}
}

// buildH2Spec builds the pinned h2spec into the Go build cache (once per pinned module set;
// concurrent builds from other checkouts each rename a complete binary into place) and returns
// its path. No go tool: the test is skipped. A failed build fails it.
func buildH2Spec(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("h2spec: the go tool is not on PATH, so h2spec cannot be built")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "h2spec"))
	if err != nil {
		t.Fatal(err)
	}
	// The binary is named by the pinned version and a hash of the pin, so a new pin builds anew.
	h := sha256.New()
	version := ""
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("h2spec pin: %v", err)
		}
		h.Write(data)
		if m := h2specPin.FindSubmatch(data); m != nil && f == "go.mod" {
			version = string(m[1])
		}
	}
	if version == "" {
		t.Fatal("h2spec pin: testdata/h2spec/go.mod requires no github.com/summerwind/h2spec")
	}
	out, err := exec.Command(goTool, "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("h2spec: go env GOCACHE: %v", err)
	}
	cache := filepath.Join(strings.TrimSpace(string(out)), "switchyard-h2spec")
	bin := filepath.Join(cache, "h2spec-"+strings.TrimSuffix(version, "+incompatible")+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatalf("h2spec: %v", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	cmd := exec.Command(goTool, "build", "-mod=readonly", "-buildvcs=false", "-o", tmp, "github.com/summerwind/h2spec/cmd/h2spec")
	cmd.Dir = dir
	// The pin's own go.mod decides, whatever the environment says about the main module.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("h2spec: build failed: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatalf("h2spec: %v", err)
	}
	return bin
}

// h2specReport is the part of h2spec's JUnit report (-j) the test reads: a suite per section,
// a case per test, failed when it has a failure or an error element (h2spec files most
// failures as errors).
type h2specReport struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Desc    string    `xml:"classname,attr"`
			Failure *struct { // either element marks a failed case
				Text string `xml:",innerxml"`
			} `xml:"failure"`
			Error *struct {
				Text string `xml:",innerxml"`
			} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

var h2specPin = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/summerwind/h2spec\s+(v\S+)`)

var h2specSummary = regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)

// runH2Spec runs h2spec against addr and fails unless every case passed.
func runH2Spec(t *testing.T, bin, addr string, useTLS bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "h2spec.xml")
	// -o: each case waits up to 5 s for the proxy's answer (h2spec's 2 s default is tight for a
	// loaded CI machine; no case waits out its timeout when the proxy conforms).
	args := []string{"-h", host, "-p", port, "-o", "5", "-j", junit}
	if useTLS {
		args = append(args, "-t", "-k")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run() // exits non-zero when a case fails: the report says which
	t.Logf("h2spec %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))

	m := h2specSummary.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("h2spec printed no summary (%v):\n%s", runErr, out.String())
	}
	total, _ := strconv.Atoi(m[1])
	passed, _ := strconv.Atoi(m[2])
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatalf("h2spec wrote no JUnit report (%v):\n%s", err, out.String())
	}
	var rep h2specReport
	if err := xml.Unmarshal(data, &rep); err != nil {
		t.Fatalf("h2spec JUnit report: %v", err)
	}
	var failed []string
	cases := 0
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			if c.Desc == "" {
				continue // h2spec's report has empty placeholder elements
			}
			cases++
			switch {
			case c.Failure != nil:
				failed = append(failed, fmt.Sprintf("%s: %s\n%s", s.Name, c.Desc, strings.TrimSpace(c.Failure.Text)))
			case c.Error != nil:
				failed = append(failed, fmt.Sprintf("%s: %s\n%s", s.Name, c.Desc, strings.TrimSpace(c.Error.Text)))
			case c.Skipped != nil:
				failed = append(failed, fmt.Sprintf("%s: %s (skipped)", s.Name, c.Desc))
			}
		}
	}
	for _, f := range failed {
		t.Errorf("h2spec case failed: %s", f)
	}
	if total != h2specCases || passed != h2specCases || cases != h2specCases || len(failed) > 0 {
		t.Errorf("h2spec: %s (report: %d cases, %d not passed); want %d passed, 0 failed",
			m[0], cases, len(failed), h2specCases)
	}
}
