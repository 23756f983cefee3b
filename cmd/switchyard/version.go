package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// version and commit are set at link time by `make build` (-ldflags -X main.version=...
// -X main.commit=...); a plain `go build` leaves version "dev" and takes the commit from the
// VCS stamp Go embeds when it builds inside a git checkout.
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `switchyard --version` prints: the version, the commit (with "+dirty" when
// built from a modified tree), the Go toolchain and the digest of the BPF objects in the binary.
type buildInfo struct {
	Version, Commit, Go, BPF string
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version(), BPF: bpfobj.ObjectsDigest()}
	if b.Commit == "" {
		b.Commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			var rev, dirty string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "+dirty"
					}
				}
			}
			if rev != "" {
				b.Commit = rev[:min(12, len(rev))] + dirty
			}
		}
	}
	return b
}

func (b buildInfo) String() string {
	return fmt.Sprintf("switchyard %s (commit %s, %s, bpf objects sha256:%s)", b.Version, b.Commit, b.Go, b.BPF)
}

func init() {
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, currentBuild()) }
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Aliases: []string{"V"}, Usage: "print the version, commit, Go version and the digest of the BPF objects"}
}
