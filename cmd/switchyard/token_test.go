package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tokenFile writes an admin token to a file only the owner reads and returns its path.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A token on the command line (readable by every user in ps) is refused by every command that
// takes one, naming the two ways to pass it instead; it never reaches a server.
func TestTokenOnCommandLineRefused(t *testing.T) {
	for _, args := range [][]string{
		{"edge", "run", "--origin", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--token", "s3cret"},
		{"edge", "purge", "--admin", "127.0.0.1:1", "--token", "s3cret", "http://www.example.com/"},
		{"edge", "stats", "--admin", "127.0.0.1:1", "--token", "s3cret"},
		{"l7", "reload", "--admin", "127.0.0.1:1", "--token", "s3cret"},
		{"l7", "drain", "--admin", "127.0.0.1:1", "--token", "s3cret", "--pool", "p", "--backend", "127.0.0.1:2"},
	} {
		// Bounded: without the refusal `edge run` would serve until the context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := runEdgeCLI(t, ctx, args...)
		cancel()
		env := "SWITCHYARD_EDGE_TOKEN"
		if args[0] == "l7" {
			env = "SWITCHYARD_L7_TOKEN"
		}
		if err == nil || !strings.Contains(err.Error(), "refuse --token") || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), env) {
			t.Errorf("%s: %v; want --token refused, naming --token-file and %s", strings.Join(args, " "), err, env)
		}
	}
}

// An empty token file is an error, not "no token" (the tests that drain, purge and push pass
// their token with --token-file).
func TestTokenFileEmpty(t *testing.T) {
	p := tokenFile(t, "")
	if _, err := runEdgeCLI(t, context.Background(), "edge", "stats", "--admin", "127.0.0.1:1", "--token-file", p); err == nil || !strings.Contains(err.Error(), p+" is empty") {
		t.Errorf("empty token file: %v; want it named as empty", err)
	}
}
