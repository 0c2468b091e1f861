package redisstore

// WithNow makes the scripts take the current instant from now instead of
// Redis's TIME, so the conformance suite can drive time.
var WithNow = withNow
