package main

import (
	"testing"
	"time"
)

// TestRun runs the example end to end: the fake webhook must see no
// violation of its limits.
func TestRun(t *testing.T) {
	if err := run(time.Second, 48); err != nil {
		t.Fatal(err)
	}
}
