package memstore

import (
	"strconv"
	"testing"
)

// TestNextID checks the ids cut from blocks, each the one before plus
// one, against the one-at-a-time formula ("m" and the count in base 36)
// across several blocks, from counts whose digits carry and grow inside
// a block (36^2 and 36^12).
func TestNextID(t *testing.T) {
	for _, start := range []uint64{0, 36*36 - 10, 36*36*36*36*36*36*36*36*36*36*36*36 - 100} {
		s := New()
		s.idN = start
		for i := uint64(1); i <= 3*idsPerBlock+5; i++ {
			want := "m" + strconv.FormatUint(start+i, 36)
			if got := s.nextID(); got != want {
				t.Fatalf("from %d, id %d = %q, want %q", start, i, got, want)
			}
		}
	}
}
