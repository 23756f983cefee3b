package tools

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// goModVersion is the Go version go.mod names.
func goModVersion(t *testing.T) string {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d[\d.]*)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no go line in go.mod")
	}
	return string(m[1])
}

// noGoEnv is an environment whose PATH has no go, with the given cache and extra variables.
func noGoEnv(t *testing.T, cache string, extra ...string) []string {
	path := "/usr/sbin:/usr/bin:/sbin:/bin"
	for _, d := range filepath.SplitList(path) {
		if _, err := os.Stat(filepath.Join(d, "go")); err == nil {
			t.Skipf("%s/go exists: cannot make a PATH without Go here", d)
		}
	}
	env := []string{"PATH=" + path, "HOME=" + t.TempDir(), "SWITCHYARD_GO_CACHE=" + cache, "LC_ALL=C"}
	return append(env, extra...)
}

func runIn(t *testing.T, d time.Duration, env []string, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = ".."
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func toolchainArch(t *testing.T) string {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no pinned toolchain for linux-%s", runtime.GOARCH)
	}
	return runtime.GOARCH
}

// TestGoBootstrap: with no Go on PATH, `make check-go` (which every Go target runs) fetches the
// official toolchain from the module proxy, verifies it and uses it; a second run reuses the
// cache without fetching.
func TestGoBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches about 70 MB from the module proxy: not with -short")
	}
	want, arch := goModVersion(t), toolchainArch(t)
	cache := t.TempDir()
	env := noGoEnv(t, cache, "GOPROXY="+os.Getenv("GOPROXY"))
	out, stderr, err := runIn(t, 10*time.Minute, env, "make", "--no-print-directory", "check-go")
	if err != nil {
		t.Fatalf("make check-go without Go on PATH: %v\n%s\n%s", err, out, stderr)
	}
	gobin := filepath.Join(cache, "go"+want+".linux-"+arch, "bin", "go")
	if !strings.Contains(out, "using "+gobin+" (go"+want+")") {
		t.Errorf("make check-go does not use the fetched toolchain %s:\n%s\n%s", gobin, out, stderr)
	}
	if !strings.Contains(stderr, "verified (h1:") {
		t.Errorf("go.sh did not say it verified the toolchain:\n%s", stderr)
	}
	v, err := exec.Command(gobin, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "go version go"+want+" linux/"+arch) {
		t.Errorf("%s version: %v %s", gobin, err, v)
	}
	out, stderr, err = runIn(t, time.Minute, env, "tools/go.sh")
	if err != nil || strings.TrimSpace(out) != gobin || strings.Contains(stderr, "fetching") {
		t.Errorf("second run: %v, printed %q, stderr %q; want %s from the cache", err, out, stderr, gobin)
	}
	// A go on PATH older than go.mod's (Debian 12's 1.19) is passed over for the toolchain.
	old := t.TempDir()
	os.WriteFile(filepath.Join(old, "go"), []byte("#!/bin/sh\necho go1.19.8\n"), 0o755)
	oldEnv := append([]string{}, env...)
	for i, e := range oldEnv {
		if strings.HasPrefix(e, "PATH=") {
			oldEnv[i] = "PATH=" + old + ":" + strings.TrimPrefix(e, "PATH=")
		}
	}
	out, stderr, err = runIn(t, time.Minute, oldEnv, "tools/go.sh")
	if err != nil || strings.TrimSpace(out) != gobin || !strings.Contains(stderr, "is 1.19.8, older than go.mod's "+want) {
		t.Errorf("with go1.19 on PATH: %v, printed %q, stderr %q; want %s", err, out, stderr, gobin)
	}
}

// TestGoBootstrapRefusesTampered: a proxy that serves another zip under the toolchain's name is
// refused by the checksum, and nothing is left in the cache.
func TestGoBootstrapRefusesTampered(t *testing.T) {
	want, arch := goModVersion(t), toolchainArch(t)
	prefix := fmt.Sprintf("golang.org/toolchain@v0.0.1-go%s.linux-%s/", want, arch)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	f, _ := zw.CreateHeader(&zip.FileHeader{Name: prefix + "bin/go", Method: zip.Deflate})
	f.Write([]byte("#!/bin/sh\necho go version go" + want + " evil\n"))
	zw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.URL.Path)
		w.Write(zb.Bytes())
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cache := t.TempDir()
	env := noGoEnv(t, cache, "GOPROXY=http://"+ln.Addr().String())
	out, stderr, err := runIn(t, time.Minute, env, "tools/go.sh")
	if err == nil || !strings.Contains(stderr, "checksum mismatch") || out != "" {
		t.Fatalf("a tampered toolchain: err %v, printed %q, stderr %q; want it refused", err, out, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || !strings.HasSuffix(asked[0], "/golang.org/toolchain/@v/v0.0.1-go"+want+".linux-"+arch+".zip") {
		t.Errorf("the proxy was asked for %v", asked)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("the refused download left %v in the cache", ents)
	}
}

// TestUnzipH1: unzip-h1.pl extracts a module zip (stored and deflated entries, modes kept) and
// prints the same go.sum hash Go computes (dirhash Hash1).
func TestUnzipH1(t *testing.T) {
	prefix := "example.com/m@v1.0.0/"
	files := map[string]string{"bin/tool": "#!/bin/sh\n", "a.txt": strings.Repeat("abc", 1000), "dir/b": ""}
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	var names []string
	for n, body := range files {
		h := &zip.FileHeader{Name: prefix + n, Method: zip.Deflate}
		if n == "dir/b" {
			h.Method = zip.Store
		}
		h.SetMode(0o644)
		if n == "bin/tool" {
			h.SetMode(0o755)
		}
		w, _ := zw.CreateHeader(h)
		w.Write([]byte(body))
		names = append(names, prefix+n)
	}
	zw.Close()
	sort.Strings(names)
	sum := sha256.New()
	for _, n := range names {
		fmt.Fprintf(sum, "%x  %s\n", sha256.Sum256([]byte(files[strings.TrimPrefix(n, prefix)])), n)
	}
	want := "h1:" + base64.StdEncoding.EncodeToString(sum.Sum(nil))
	dir := t.TempDir()
	zp := filepath.Join(dir, "m.zip")
	os.WriteFile(zp, zb.Bytes(), 0o600)
	out, err := exec.Command("perl", "unzip-h1.pl", zp, filepath.Join(dir, "x"), prefix).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("unzip-h1.pl: %v %s, want %s", err, out, want)
	}
	for n, body := range files {
		b, err := os.ReadFile(filepath.Join(dir, "x", n))
		if err != nil || string(b) != body {
			t.Errorf("%s: %v %q", n, err, b)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "x", "bin/tool")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/tool lost its mode: %v", fi)
	}
	if out, err := exec.Command("perl", "unzip-h1.pl", zp, filepath.Join(dir, "y"), "other@v1/").CombinedOutput(); err == nil {
		t.Errorf("a zip outside the prefix was extracted: %s", out)
	}
}

// TestToolchainSumsPinned: tools/go-toolchain.sum pins go.mod's toolchain for linux-amd64 and
// linux-arm64 (a go.mod bump without `tools/go.sh pin` fails here), and this machine's entry is
// what sum.golang.org has (go mod download checks the hash against the checksum database).
func TestToolchainSumsPinned(t *testing.T) {
	want, arch := goModVersion(t), toolchainArch(t)
	b, err := os.ReadFile("go-toolchain.sum")
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "golang.org/toolchain" || !strings.HasPrefix(f[2], "h1:") {
			t.Fatalf("bad line %q", l)
		}
		pinned[f[1]] = f[2]
	}
	for _, a := range []string{"amd64", "arm64"} {
		if pinned["v0.0.1-go"+want+".linux-"+a] == "" {
			t.Errorf("go-toolchain.sum has no entry for go%s linux-%s: run `tools/go.sh pin`", want, a)
		}
	}
	if testing.Short() {
		return
	}
	v := "v0.0.1-go" + want + ".linux-" + arch
	cmd := exec.Command("go", "mod", "download", "-json", "golang.org/toolchain@"+v)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`"Sum": "(h1:[^"]+)"`).FindSubmatch(out)
	if m == nil || string(m[1]) != pinned[v] {
		t.Errorf("sum.golang.org has %s for %s, go-toolchain.sum %s", m, v, pinned[v])
	}
}
