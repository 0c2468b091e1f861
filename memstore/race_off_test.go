//go:build !race

package memstore_test

// raceEnabled: the race detector's instrumentation allocates on its own.
const raceEnabled = false
