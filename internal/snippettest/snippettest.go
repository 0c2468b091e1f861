// Package snippettest keeps the Go snippets of the documentation compiling:
// each snippet is a region of a Go file that the build compiles (a test
// file of the module that has the snippet's dependencies, such as an SDK),
// and a test checks that the page shows that region word for word.
//
// In a Markdown page, an HTML comment names the snippet of the next Go
// code block:
//
//	<!-- snippet github-enterprise-server -->
//	```go
//	policy, err := githubquota.Policy(githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/"})
//	```
//
// In the Go file, the region is the lines between two comments:
//
//	// snippet github-enterprise-server
//	policy, err := githubquota.Policy(githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/"})
//	// snippet end
//
// A code block may start with an import declaration, which the Go file
// must have among its imports; the rest must be the region's lines, with
// the region's indentation removed. [Check] also finds snippets that a
// page names and no file has, and regions that no page shows.
package snippettest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
)

// TB is the part of testing.TB that Check uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Check checks the snippets whose names start with prefix: each that a
// Markdown page of pages names must be a region of one of the Go files
// srcs, word for word, and each region of srcs whose name starts with
// prefix must be shown by a page. docs names Go files whose package doc
// comment shows a snippet: its first code block must be the region named
// by the docs key (a file path) exactly.
func Check(t TB, prefix string, pages, srcs []string, docs map[string]string) {
	t.Helper()
	regions := map[string]region{}
	for _, src := range srcs {
		rs, err := regionsOf(src)
		if err != nil {
			t.Fatalf("snippettest: %v", err)
		}
		for name, r := range rs {
			if prev, ok := regions[name]; ok {
				t.Fatalf("snippettest: region %q is in %s and %s", name, prev.file, r.file)
			}
			regions[name] = r
		}
	}
	shown := map[string]bool{}
	for _, page := range pages {
		blocks, err := blocksOf(page)
		if err != nil {
			t.Fatalf("snippettest: %v", err)
		}
		for _, b := range blocks {
			if !strings.HasPrefix(b.name, prefix) {
				continue
			}
			shown[b.name] = true
			r, ok := regions[b.name]
			if !ok {
				t.Errorf("%s:%d: snippet %q is in no compiled file (%s)", page, b.line, b.name, strings.Join(srcs, ", "))
				continue
			}
			for _, imp := range b.imports {
				if !slices.Contains(r.imports, imp) {
					t.Errorf("%s:%d: snippet %q imports %s, which %s does not", page, b.line, b.name, imp, r.file)
				}
			}
			if diff := compare(b.code, r.code); diff != "" {
				t.Errorf("%s:%d: snippet %q differs from %s:%d:\n%s", page, b.line, b.name, r.file, r.line, diff)
			}
		}
	}
	for file, name := range docs {
		code, line, err := packageDocBlock(file)
		if err != nil {
			t.Fatalf("snippettest: %v", err)
		}
		shown[name] = true
		r, ok := regions[name]
		if !ok {
			t.Errorf("%s: the package doc shows snippet %q, which is in no compiled file", file, name)
			continue
		}
		if diff := compare(code, r.code); diff != "" {
			t.Errorf("%s:%d: the package doc's snippet differs from %q at %s:%d:\n%s", file, line, name, r.file, r.line, diff)
		}
	}
	for name, r := range regions {
		if strings.HasPrefix(name, prefix) && !shown[name] {
			t.Errorf("%s:%d: region %q is shown by no page", r.file, r.line, name)
		}
	}
}

// A region is a compiled snippet.
type region struct {
	file    string
	line    int
	code    []string
	imports []string // of the file, as `"path"` or `name "path"`
}

// regionsOf reads the regions of a Go file.
func regionsOf(file string) (map[string]region, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), file, src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var imports []string
	for _, s := range f.Imports {
		imp := s.Path.Value
		if s.Name != nil {
			imp = s.Name.Name + " " + imp
		}
		imports = append(imports, imp)
	}
	out := map[string]region{}
	var cur *region
	var name string
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		marker, isMarker := strings.CutPrefix(strings.TrimSpace(line), "// snippet ")
		switch {
		case isMarker && marker == "end":
			if cur == nil {
				return nil, fmt.Errorf("%s:%d: snippet end outside a snippet", file, n)
			}
			out[name] = *cur
			cur = nil
		case isMarker:
			if cur != nil {
				return nil, fmt.Errorf("%s:%d: snippet %q inside snippet %q", file, n, marker, name)
			}
			if _, dup := out[marker]; dup {
				return nil, fmt.Errorf("%s:%d: snippet %q twice", file, n, marker)
			}
			name, cur = marker, &region{file: file, line: n + 1, imports: imports}
		case cur != nil:
			cur.code = append(cur.code, line)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: snippet %q has no end", file, name)
	}
	return out, sc.Err()
}

// A block is a named Go code block of a page.
type block struct {
	name    string
	line    int
	imports []string
	code    []string
}

// blocksOf reads the named Go code blocks of a Markdown page.
func blocksOf(page string) ([]block, error) {
	src, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(src), "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		name, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "<!-- snippet ")
		if !ok {
			continue
		}
		name, ok = strings.CutSuffix(name, " -->")
		if !ok || i+1 >= len(lines) || lines[i+1] != "```go" {
			return nil, fmt.Errorf("%s:%d: a snippet comment must be <!-- snippet NAME --> right before a ```go block", page, i+1)
		}
		b := block{name: strings.TrimSpace(name), line: i + 3}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 {
			return nil, fmt.Errorf("%s:%d: snippet %q has no closing ```", page, i+1, b.name)
		}
		code := lines[i+2 : i+2+end]
		code, b.imports = cutImports(code)
		b.code = code
		out = append(out, b)
		i += 2 + end
	}
	return out, nil
}

// cutImports removes an import declaration (and the blank lines after it)
// from the start of code, and returns its imports.
func cutImports(code []string) ([]string, []string) {
	if len(code) == 0 {
		return code, nil
	}
	var imports []string
	switch first := code[0]; {
	case first == "import (":
		end := slices.Index(code, ")")
		if end < 0 {
			return code, nil
		}
		for _, l := range code[1:end] {
			if l = strings.TrimSpace(l); l != "" {
				imports = append(imports, l)
			}
		}
		code = code[end+1:]
	case strings.HasPrefix(first, "import "):
		imports = append(imports, strings.TrimSpace(strings.TrimPrefix(first, "import ")))
		code = code[1:]
	default:
		return code, nil
	}
	for len(code) > 0 && strings.TrimSpace(code[0]) == "" {
		code = code[1:]
	}
	return code, imports
}

// packageDocBlock returns the first code block of a Go file's package doc
// comment, without the comment markers and the block's tab, and its line.
func packageDocBlock(file string) ([]string, int, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	var code []string
	start := 0
	for n, line := range strings.Split(string(src), "\n") {
		text, isComment := strings.CutPrefix(line, "//")
		switch {
		case isComment && strings.HasPrefix(text, "\t"):
			if start == 0 {
				start = n + 1
			}
			code = append(code, strings.TrimPrefix(text, "\t"))
			continue
		case start != 0 && isComment && strings.TrimSpace(text) == "":
			code = append(code, "") // a blank line in the block, or after it
			continue
		}
		if start != 0 || !isComment {
			break // the block ended, or the doc comment did
		}
	}
	if start == 0 {
		return nil, 0, fmt.Errorf("%s: the package doc has no code block", file)
	}
	return trimBlank(code), start, nil
}

func trimBlank(code []string) []string {
	for len(code) > 0 && code[len(code)-1] == "" {
		code = code[:len(code)-1]
	}
	return code
}

// compare returns "" when a page's code is the region's, once the
// region's common indentation is removed; else the first difference.
func compare(page, code []string) string {
	code = dedent(code)
	for i := range max(len(page), len(code)) {
		var p, c string
		if i < len(page) {
			p = page[i]
		}
		if i < len(code) {
			c = code[i]
		}
		if p != c || i >= len(page) || i >= len(code) {
			return fmt.Sprintf("line %d of the snippet:\n  page: %q\n  code: %q", i+1, p, c)
		}
	}
	return ""
}

// dedent removes the tabs that every non-blank line of code starts with.
func dedent(code []string) []string {
	tabs := -1
	for _, l := range code {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if tabs < 0 || n < tabs {
			tabs = n
		}
	}
	out := make([]string, len(code))
	for i, l := range code {
		if len(l) >= tabs && tabs > 0 {
			l = l[tabs:]
		}
		out[i] = strings.TrimRight(l, " \t")
	}
	return out
}
