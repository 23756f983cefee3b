// Package tools holds the build's helper scripts: go.sh (a Go that builds this module, fetched
// and verified when the machine has none), unzip-h1.pl (extracts a module zip and computes its
// go.sum hash without unzip or Go) and go-toolchain.sum (the pinned toolchain hashes). Its tests
// run them as `make` does.
package tools
