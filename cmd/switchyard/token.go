package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// tokenFlags are the flags of a command that needs a stop's admin token. The token comes from a
// file (--token-file) or the environment variable env only: a value on the command line is
// readable by every local user in ps (/proc/PID/cmdline) for as long as the process runs.
// --token stays, hidden, only to refuse it with the way to pass the token instead.
func tokenFlags(env, what string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "token-file", Usage: what + ": read it from `FILE` (or set " + env + " to the token)"},
		&cli.StringFlag{Name: "token", Hidden: true, Usage: "refused: use --token-file or " + env},
	}
}

// adminToken is the admin token given by --token-file or env ("" when neither is), refusing a
// --token on the command line.
func adminToken(c *cli.Context, env string) (string, error) {
	if c.IsSet("token") {
		return "", fmt.Errorf("refuse --token: a token on the command line is visible to every local user in ps; write it to a file only you can read and pass --token-file FILE, or set %s", env)
	}
	path := c.String("token-file")
	if path == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read admin token: %w (--token-file names a file holding the token)", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("read admin token: %s is empty; write the token in it", path)
	}
	return t, nil
}

// adminRequest sends one request to a stop's admin endpoint at url, with the token of
// --token-file or env (adminToken), if any, as its bearer token, and returns the answer's status
// and body.
func adminRequest(c *cli.Context, env, method, url string, timeout time.Duration) (int, []byte, error) {
	req, err := http.NewRequestWithContext(c.Context, method, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("build admin request: %w", err)
	}
	t, err := adminToken(c, env)
	if err != nil {
		return 0, nil, err
	}
	if t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("call admin %s: %w", req.URL.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("read admin answer: %w", err)
	}
	return resp.StatusCode, body, nil
}
