package memstore

import (
	"strconv"
	"testing"
)

// TestNextID checks the ids cut from blocks against the one-at-a-time
// formula ("m" and the count in base 36) across several blocks, from a
// count whose digits grow inside a block.
func TestNextID(t *testing.T) {
	for _, start := range []uint64{0, 36*36 - 10, 1<<64 - 3*idsPerBlock} {
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
