package policyfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A node is one value of a policy file, read from YAML or JSON, with the
// line it is on. The builder walks nodes, so both formats are checked
// by one schema, and every problem it finds has a line.
type node struct {
	kind kind
	line int

	entries []entry // mapping: in file order, duplicates kept
	items   []*node // list

	// A scalar is its text as written and what the format makes of it.
	text  string
	typ   scalarType
	num   string // number: decimal digits, or a float's shortest form
	truth bool   // boolean
	loose bool   // YAML: any non-null scalar may be read as a string

	expanded int // values in n, YAML aliases expanded, at most maxNodes+1
}

type kind int

const (
	scalarNode kind = iota
	mappingNode
	listNode
)

type scalarType int

const (
	nullScalar scalarType = iota
	stringScalar
	numberScalar
	boolScalar
)

// An entry is one key of a mapping and its value.
type entry struct {
	key  string
	line int
	val  *node
}

// A syntaxError is why a file's format refuses it, and where.
type syntaxError struct {
	line int
	msg  string
}

// maxDepth bounds the nesting of a file (the schema needs 5 levels), and
// maxNodes the values a file may expand to through YAML aliases.
const (
	maxDepth = 32
	maxNodes = 1 << 20
)

var errEmpty = &syntaxError{msg: "empty file"}

// parse reads data as strict JSON when the file's name ends in .json,
// else as YAML. It returns nil for a file that holds nothing.
func parse(name string, data []byte) (*node, *syntaxError) {
	if strings.EqualFold(name[max(0, len(name)-len(".json")):], ".json") {
		return parseJSON(data)
	}
	return parseYAML(data)
}

// parseYAML reads one YAML document.
func parseYAML(data []byte) (*node, *syntaxError) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errEmpty
		}
		return nil, yamlSyntax(err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case err == nil:
		return nil, &syntaxError{line: more.Line, msg: "a second YAML document: a policy file holds one"}
	case !errors.Is(err, io.EOF):
		return nil, yamlSyntax(err)
	}
	c := yamlConverter{done: map[*yaml.Node]*node{}}
	n, err := c.convert(&doc, 0)
	if err != nil {
		return nil, err
	}
	if n.expanded > maxNodes {
		return nil, &syntaxError{line: 1, msg: "too many values once YAML aliases are expanded"}
	}
	return n, nil
}

// yamlSyntax turns go-yaml's "yaml: line N: what" into a syntaxError.
func yamlSyntax(err error) *syntaxError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		digits, what, _ := strings.Cut(rest, ": ")
		if n, err := strconv.Atoi(digits); err == nil {
			line, msg = n, what
		}
	}
	return &syntaxError{line: line, msg: "invalid YAML: " + msg}
}

// yamlConverter turns go-yaml's nodes into nodes. A node reached through
// several aliases is converted once and shared.
type yamlConverter struct {
	done map[*yaml.Node]*node
}

func (c *yamlConverter) convert(y *yaml.Node, depth int) (*node, *syntaxError) {
	if depth > maxDepth {
		return nil, &syntaxError{line: y.Line, msg: fmt.Sprintf("nested more than %d levels deep", maxDepth)}
	}
	if n, ok := c.done[y]; ok {
		return n, nil
	}
	var n *node
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil, errEmpty
		}
		return c.convert(y.Content[0], depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &syntaxError{line: y.Line, msg: "invalid YAML: an alias to nothing"}
		}
		return c.convert(y.Alias, depth+1)
	case yaml.MappingNode:
		n = &node{kind: mappingNode, line: y.Line}
		var merged []entry
		for k := 0; k+1 < len(y.Content); k += 2 {
			key, val := y.Content[k], y.Content[k+1]
			v, err := c.convert(val, depth+1)
			if err != nil {
				return nil, err
			}
			if key.ShortTag() == "!!merge" { // <<: *defaults
				for _, m := range v.mergeable() {
					merged = append(merged, m.entries...)
				}
				continue
			}
			n.entries = append(n.entries, entry{key: key.Value, line: key.Line, val: v})
		}
		for _, e := range merged { // explicit keys win, then earlier merges
			if !n.has(e.key) {
				n.entries = append(n.entries, e)
			}
		}
	case yaml.SequenceNode:
		n = &node{kind: listNode, line: y.Line}
		for _, item := range y.Content {
			v, err := c.convert(item, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
	default:
		n = yamlScalar(y)
	}
	n.count()
	c.done[y] = n
	return n, nil
}

// mergeable returns the mappings a merge key brings in: n itself or the
// mappings of a list.
func (n *node) mergeable() []*node {
	switch n.kind {
	case mappingNode:
		return []*node{n}
	case listNode:
		var ms []*node
		for _, item := range n.items {
			if item.kind == mappingNode {
				ms = append(ms, item)
			}
		}
		return ms
	}
	return nil
}

func (n *node) has(key string) bool {
	for _, e := range n.entries {
		if e.key == key {
			return true
		}
	}
	return false
}

// count sets n.expanded from its values'.
func (n *node) count() {
	n.expanded = 1
	for _, e := range n.entries {
		n.expanded = min(n.expanded+e.val.expanded, maxNodes+1)
	}
	for _, item := range n.items {
		n.expanded = min(n.expanded+item.expanded, maxNodes+1)
	}
}

// yamlScalar resolves a YAML scalar as go-yaml does (5 is a number, "5"
// a string, true a boolean, ~ null).
func yamlScalar(y *yaml.Node) *node {
	n := &node{kind: scalarNode, line: y.Line, text: y.Value, typ: stringScalar, loose: true}
	switch y.ShortTag() {
	case "!!null":
		n.typ, n.loose = nullScalar, false
	case "!!bool":
		if err := y.Decode(&n.truth); err == nil {
			n.typ = boolScalar
		}
	case "!!int":
		var v any
		if err := y.Decode(&v); err == nil {
			n.typ, n.num = numberScalar, fmt.Sprint(v)
		}
	case "!!float":
		var f float64
		if err := y.Decode(&f); err == nil {
			n.typ, n.num = numberScalar, strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return n
}

// parseJSON reads one JSON value with encoding/json's tokenizer, which
// refuses anything that is not JSON (a trailing comma, a comment, single
// quotes), and keeps each value's line.
func parseJSON(data []byte) (*node, *syntaxError) {
	p := jsonParser{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	p.dec.UseNumber()
	for i, c := range data {
		if c == '\n' {
			p.newlines = append(p.newlines, i)
		}
	}
	tok, err := p.dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, errEmpty
	}
	if err != nil {
		return nil, p.syntax(err)
	}
	n, serr := p.value(tok, 0)
	if serr != nil {
		return nil, serr
	}
	switch _, err := p.dec.Token(); {
	case err == nil:
		return nil, &syntaxError{line: p.line(), msg: "invalid JSON: more data after the end of the top-level value"}
	case !errors.Is(err, io.EOF):
		return nil, p.syntax(err)
	}
	return n, nil
}

type jsonParser struct {
	dec      *json.Decoder
	data     []byte
	newlines []int // offsets of '\n' in data
}

// line returns the line of the token just read: tokens hold no newline,
// so the line its end is on.
func (p *jsonParser) line() int { return p.lineAt(int(p.dec.InputOffset()) - 1) }

// lineAt returns the line of the byte at offset.
func (p *jsonParser) lineAt(offset int) int {
	return 1 + sort.SearchInts(p.newlines, offset)
}

func (p *jsonParser) syntax(err error) *syntaxError {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &syntaxError{line: p.lineAt(int(se.Offset)), msg: "invalid JSON: " + se.Error()}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &syntaxError{line: p.lineAt(len(p.data)), msg: "invalid JSON: unexpected end of file"}
	}
	return &syntaxError{msg: "invalid JSON: " + err.Error()}
}

func (p *jsonParser) next() (json.Token, *syntaxError) {
	tok, err := p.dec.Token()
	if err != nil {
		return nil, p.syntax(err)
	}
	return tok, nil
}

// until calls each with every token up to the closing delimiter end,
// which it consumes; each reads the rest of the item its token starts.
func (p *jsonParser) until(end json.Delim, each func(tok json.Token) *syntaxError) *syntaxError {
	for {
		tok, err := p.next()
		if err != nil {
			return err
		}
		if tok == end {
			return nil
		}
		if err := each(tok); err != nil {
			return err
		}
	}
}

// value reads the value that starts with tok.
func (p *jsonParser) value(tok json.Token, depth int) (*node, *syntaxError) {
	line := p.line()
	if depth > maxDepth {
		return nil, &syntaxError{line: line, msg: fmt.Sprintf("nested more than %d levels deep", maxDepth)}
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			n := &node{kind: mappingNode, line: line}
			return n, p.until('}', func(tok json.Token) *syntaxError {
				key, _ := tok.(string) // the tokenizer gives a string here, or an error
				keyLine := p.line()
				tok, err := p.next()
				if err != nil {
					return err
				}
				v, err := p.value(tok, depth+1)
				if err != nil {
					return err
				}
				n.entries = append(n.entries, entry{key: key, line: keyLine, val: v})
				return nil
			})
		}
		n := &node{kind: listNode, line: line}
		return n, p.until(']', func(tok json.Token) *syntaxError {
			v, err := p.value(tok, depth+1)
			if err != nil {
				return err
			}
			n.items = append(n.items, v)
			return nil
		})
	case string:
		return &node{kind: scalarNode, line: line, typ: stringScalar, text: t}, nil
	case json.Number:
		return &node{kind: scalarNode, line: line, typ: numberScalar, text: string(t), num: string(t)}, nil
	case bool:
		return &node{kind: scalarNode, line: line, typ: boolScalar, text: strconv.FormatBool(t), truth: t}, nil
	}
	return &node{kind: scalarNode, line: line, typ: nullScalar, text: "null"}, nil
}
