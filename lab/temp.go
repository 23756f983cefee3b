package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
)

// TempPrefix is a fresh prefix for a short-lived lab (experiments, benchmarks), so that it never
// collides with a running lab or another run.
func TempPrefix(first string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return first + hex.EncodeToString(b)
}

// Binary finds the switchyard binary the lab's processes run: this program whatever its name
// (`go build -o sy ./cmd/switchyard` runs as sy), unless it is a test binary, which has no
// `lab app` or `lb run`: then $SWITCHYARD_BIN (tests set it).
func Binary() (string, error) {
	if exe, err := os.Executable(); err == nil && !testing.Testing() {
		return exe, nil
	}
	if p := os.Getenv("SWITCHYARD_BIN"); p != "" {
		return p, nil
	}
	return "", errors.New("find switchyard binary: run this through `switchyard lab ...`, or set SWITCHYARD_BIN to a built switchyard (go build -o bin/switchyard ./cmd/switchyard)")
}
