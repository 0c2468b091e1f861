package snippettest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a TB that keeps what it is told.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

const src = `// Package p shows x:
//
//	x := 1
//	_ = x
//
// and more.
package p

import (
	"fmt"
	gh "example.com/github"
)

func f() {
	// snippet ex-one
	x := 1
	_ = x
	// snippet end
	if true {
		// snippet ex-two
		fmt.Println(gh.X)

		fmt.Println("b")
		// snippet end
	}
}
`

const page = "text\n\n<!-- snippet ex-one -->\n```go\nx := 1\n_ = x\n```\n\n" +
	"<!-- snippet ex-two -->\n```go\nimport (\n\t\"fmt\"\n\tgh \"example.com/github\"\n)\n\nfmt.Println(gh.X)\n\nfmt.Println(\"b\")\n```\n" +
	"<!-- snippet other-x -->\n```go\nnot ours\n```\n"

func write(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func check(t *testing.T, pageText, srcText string, docs bool) []string {
	pg, sr := write(t, "page.md", pageText), write(t, "src.go", srcText)
	var d map[string]string
	if docs {
		d = map[string]string{sr: "ex-one"}
	}
	r := &recorder{}
	Check(r, "ex-", []string{pg}, []string{sr}, d)
	return r.errs
}

func TestCheck(t *testing.T) {
	assert.Empty(t, check(t, page, src, true), "the page and the package doc show the regions")

	cases := []struct {
		name       string
		page, src  string
		docs       bool
		complaints []string
	}{
		{"a word differs", strings.Replace(page, `"b"`, `"c"`, 1), src, false, []string{`snippet "ex-two" differs`, `page: "fmt.Println(\"c\")"`}},
		{"a line more on the page", strings.Replace(page, "_ = x\n", "_ = x\nx++\n", 1), src, false, []string{`snippet "ex-one" differs`}},
		{"a line more in the code", page, strings.Replace(src, "\t_ = x\n\t// snippet end", "\t_ = x\n\tx++\n\t// snippet end", 1), false, []string{`snippet "ex-one" differs`}},
		{"an import the file lacks", strings.Replace(page, `"fmt"`, `"os"`, 1), src, false, []string{`imports "os"`}},
		{"no region", strings.Replace(page, "ex-two", "ex-three", 1), src, false, []string{`snippet "ex-three" is in no compiled file`, `region "ex-two" is shown by no page`}},
		{"the package doc differs", page, strings.Replace(src, "//\t_ = x", "//\t_ = y", 1), true, []string{"the package doc's snippet differs"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := check(t, tc.page, tc.src, tc.docs)
			require.NotEmpty(t, errs)
			all := strings.Join(errs, "\n")
			for _, c := range tc.complaints {
				assert.Contains(t, all, c)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	for name, tc := range map[string]struct{ page, src, says string }{
		"comment not before a block": {"<!-- snippet ex-one -->\ntext\n", src, "right before a ```go block"},
		"block not closed":           {"<!-- snippet ex-one -->\n```go\nx := 1\n", src, "no closing"},
		"region not closed":          {page, strings.Replace(src, "\t// snippet end\n\tif", "\tif", 1), "inside snippet"},
		"end without start":          {page, src + "// snippet end\n", "outside a snippet"},
	} {
		t.Run(name, func(t *testing.T) {
			errs := check(t, tc.page, tc.src, false)
			require.NotEmpty(t, errs)
			assert.Contains(t, strings.Join(errs, "\n"), tc.says)
		})
	}
}
