package l7

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// An access log in the operator's format: every request, served by the core or by net/http,
// is one line of the template's variables; after logrotate moves the file, ReopenAccessLog (the
// process's SIGUSR1) writes to a new one at the path. An unknown variable is refused by name.
func TestAccessLogFormatAndReopen(t *testing.T) {
	b := startBackend(t, "b", nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
access_log: %q
access_log_format: '$remote_addr "$request" $status $body_bytes_sent route=$route upstream=$upstream_addr'
routes: [{name: r, match: {path: {prefix: /app}}, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, path, b.addr))
	get := func(p string) {
		resp, err := testClient.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get("/app/x") // the core
	get("/nope")  // no route: net/http answers 404
	line := regexp.MustCompile(`^127\.0\.0\.1 "GET (/app/x|/nope) HTTP/1\.1" (200|404) [0-9]+ route=(r|-) upstream=(127\.0\.0\.1:[0-9]+|-)$`)
	read := func(p string, n int) []string {
		var lines []string
		testutil.Eventually(t, 3*time.Second, func() bool {
			b, _ := os.ReadFile(p)
			lines = strings.Split(strings.TrimSpace(string(b)), "\n")
			return len(lines) >= n && lines[0] != ""
		}, "%s: fewer than %d lines", p, n)
		return lines
	}
	for _, l := range read(path, 2) {
		if !line.MatchString(l) {
			t.Errorf("line %q does not follow the template", l)
		}
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	get("/app/after")
	if l := read(path, 1); len(l) != 1 || !strings.Contains(l[0], "/app/after") {
		t.Errorf("after the reopen the new file holds %q", l)
	}
	_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\naccess_log_format: '$remote_adr $status'\n"))
	if err == nil || !strings.Contains(err.Error(), "access_log_format: unknown variable $remote_adr; use $attempts") {
		t.Errorf("unknown variable: %v", err)
	}
}
