package redisstore

// WithNow makes the scripts take the current instant from now instead of
// Redis's TIME, so the conformance suite can drive time.
var WithNow = withNow

// WithoutReplayIDs turns decision ids off even for a client that retries,
// so tests can show the double charge that ids prevent.
func WithoutReplayIDs() Option {
	return func(s *Store) { s.replay = replayOffForTest }
}

// ClusterReloads returns how many cluster state reloads s has asked for.
func ClusterReloads(s *Store) int64 { return s.reload.count.Load() }

// WithGenericTake makes Take run take.lua even for demands whose limits
// are all GCRA, so tests can compare it with take_gcra.lua.
func WithGenericTake() Option {
	return func(s *Store) { s.generic = true }
}

// ReplayMode names what s does about calls sent again: "ids", "detect" or
// "none".
func ReplayMode(s *Store) string {
	switch {
	case s.replayMS > 0:
		return "ids"
	case s.detect:
		return "detect"
	}
	return "none"
}
