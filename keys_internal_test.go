package throttle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEscapeKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"errors", "errors"},
		{"C0123:team@x", "C0123:team@x"},
		{"a b", "a%20b"},
		{"{tag}", "%7Btag%7D"},
		{"100%", "100%25"},
		{"a/b", "a%2Fb"},
		{"", ""},
		{"\x00", "%00"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, escapeKey(tt.in), "%q", tt.in)
	}
	long := strings.Repeat("x", 10<<10)
	got := escapeKey(long)
	assert.True(t, strings.HasPrefix(got, "%h"), got)
	assert.LessOrEqual(t, len(got), maxKeyLen)
	assert.NotEqual(t, got, escapeKey(long+"y"))
}

func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"", "a", "{x}", "%41", "A", "%h00", strings.Repeat("{", 200)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escapeKey(a), escapeKey(b)
		if len(ea) > maxKeyLen {
			t.Fatalf("escapeKey(%q) is %d bytes", a, len(ea))
		}
		for i := 0; i < len(ea); i++ {
			if c := ea[i]; !safeKeyByte(c) && c != '%' {
				t.Fatalf("escapeKey(%q) = %q holds %q", a, ea, c)
			}
		}
		if a != b && ea == eb {
			t.Fatalf("escapeKey(%q) == escapeKey(%q) == %q", a, b, ea)
		}
	})
}
