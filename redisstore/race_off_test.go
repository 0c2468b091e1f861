//go:build !race

package redisstore_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
