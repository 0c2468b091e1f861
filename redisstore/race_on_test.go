//go:build race

package redisstore_test

// raceEnabled: the race detector slows every client several times, so a
// fleet's late retries leave more of a limit unused meanwhile (the
// classes fleets assert a lower floor then, and log what they got).
const raceEnabled = true
