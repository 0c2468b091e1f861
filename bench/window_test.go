package main

import (
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestMaxIn(t *testing.T) {
	tests := []struct {
		name string
		ts   []time.Duration
		w    time.Duration
		want int
	}{
		{"empty", nil, time.Second, 0},
		{"one", []time.Duration{5 * ms}, time.Second, 1},
		{"closed window counts both edges", []time.Duration{0, 100 * ms}, 100 * ms, 2},
		{"just over", []time.Duration{0, 101 * ms}, 100 * ms, 1},
		{"burst then steady", []time.Duration{0, 0, 0, 10 * ms, 20 * ms, 30 * ms}, 20 * ms, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxIn(tt.ts, tt.w); got != tt.want {
				t.Errorf("maxIn = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMaxCertain(t *testing.T) {
	tests := []struct {
		name string
		ss   []span
		w    time.Duration
		want int
	}{
		{"empty", nil, time.Second, 0},
		{"inside", []span{{0, 10 * ms}, {20 * ms, 30 * ms}}, 30 * ms, 2},
		{"one sticks out", []span{{0, 10 * ms}, {20 * ms, 31 * ms}}, 30 * ms, 1},
		{"later window holds more", []span{{0, 50 * ms}, {40 * ms, 45 * ms}, {41 * ms, 60 * ms}, {42 * ms, 70 * ms}}, 30 * ms, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxCertain(tt.ss, tt.w); got != tt.want {
				t.Errorf("maxCertain = %d, want %d", got, tt.want)
			}
			// Never more than the return times say.
			if got, est := maxCertain(tt.ss, tt.w), maxIn(ends(tt.ss), tt.w); got > est {
				t.Errorf("maxCertain = %d > maxIn of the ends = %d", got, est)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	sorted := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if !slices.IsSorted(sorted) {
		t.Fatal("not sorted")
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(sorted, tt.q); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}
