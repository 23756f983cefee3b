//go:build race

package store

// raceEnabled: the race detector changes what the allocator keeps live.
const raceEnabled = true
