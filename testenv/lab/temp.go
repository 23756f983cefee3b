package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
)

// TempPrefix is a fresh prefix for a short-lived lab (experiments, benchmarks), so that it never
// collides with a running lab or another run.
func TempPrefix(first string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return first + hex.EncodeToString(b)
}

// Binary finds the switchyard binary the lab's processes run: this program when it is
// switchyard, else $SWITCHYARD_BIN (tests set it).
func Binary() (string, error) {
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "switchyard" {
		return exe, nil
	}
	if p := os.Getenv("SWITCHYARD_BIN"); p != "" {
		return p, nil
	}
	return "", errors.New("find switchyard binary: run this through `switchyard lab ...`, or set SWITCHYARD_BIN to a built switchyard (go build -o bin/switchyard ./cmd/switchyard)")
}
