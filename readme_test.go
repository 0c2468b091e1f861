package throttle_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertReadmeShows checks that the first Go block of the README after
// the text after shows, word for word, the lines of file between the
// markers "// readme:NAME:begin" and "// readme:NAME:end" (one tab of the
// file's indentation, and indent of the README's, taken off each line).
func assertReadmeShows(t *testing.T, file, name, after, indent string) {
	t.Helper()
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(src), "// readme:"+name+":begin\n")
	require.True(t, ok, "%s: no begin marker", file)
	body, _, ok := strings.Cut(rest, "\t// readme:"+name+":end\n")
	require.True(t, ok, "%s: no end marker", file)
	var want []string
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(line, "\t"))
	}
	_, block, ok := strings.Cut(string(readme), after)
	require.True(t, ok, "README: no %q", after)
	_, block, ok = strings.Cut(block, "```go\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "\n"+indent+"```")
	require.True(t, ok)
	var got []string
	for _, line := range strings.Split(block, "\n") {
		got = append(got, strings.TrimPrefix(line, indent))
	}
	assert.Equal(t, want, got)
}
