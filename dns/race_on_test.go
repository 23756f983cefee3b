//go:build race

package dns

// raceEnabled: the race detector's shadow memory makes resident-set figures meaningless.
const raceEnabled = true
