package bpfobj

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectsDigest is the SHA-256 of the BPF objects compiled into this binary (lb, decap and pass,
// in that order), shortened to 16 hex digits: `switchyard --version` prints it, so two binaries
// with the same digest load the same programs whatever their Go code. It lives here, beside the
// generated files, because the embedded objects (_LBBytes, ...) are unexported.
func ObjectsDigest() string {
	h := sha256.New()
	for _, b := range [][]byte{_LBBytes, _DecapBytes, _PassBytes} {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
