package main

import (
	"testing"
	"time"
)

// TestRun runs the example end to end: the fake webhook must see no
// violation of its limits. Its period is the example's default, 2 s: at
// 1 s, with no margin on the rule's windows, the webhook answered 429 to
// 1-4 notifications in 7 runs of 15 beside two CPU burners under the race
// detector (none in 10 quiet runs), and in a CI run: the first burst
// landed up to 330 ms after it was sent on a loaded machine, where the
// webhook forgave 50 ms. With the margin, at 2 s: none in 15 runs beside two burners.
func TestRun(t *testing.T) {
	if err := run(2*time.Second, 48); err != nil {
		t.Fatal(err)
	}
}
