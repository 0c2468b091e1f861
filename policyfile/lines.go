package policyfile

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lineIndex maps a rule's index (-1: the document) and a field path, as
// in Error.Field, to the line the file gives it on.
type lineIndex map[int]map[string]int

// line returns the line of field in rule, or of its closest enclosing
// field, or of the rule, or 0.
func (x lineIndex) line(rule int, field string) int {
	m := x[rule]
	for f := field; f != ""; {
		if n, ok := m[f]; ok {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return m[""]
}

// fieldLines indexes the lines of the fields of a decoded document.
func fieldLines(doc *yaml.Node) lineIndex {
	x := lineIndex{-1: {}}
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return x
	}
	for k := 0; k+1 < len(root.Content); k += 2 {
		key, val := root.Content[k], root.Content[k+1]
		x[-1][key.Value] = key.Line
		if key.Value != "rules" || val.Kind != yaml.SequenceNode {
			continue
		}
		for i, item := range val.Content {
			m := map[string]int{"": item.Line}
			index(m, "", item)
			x[i] = m
		}
	}
	return x
}

// index records the lines of n's fields under prefix.
func index(m map[string]int, prefix string, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for k := 0; k+1 < len(n.Content); k += 2 {
			key, val := n.Content[k], n.Content[k+1]
			name := key.Value
			if prefix != "" {
				name = prefix + "." + key.Value
			}
			m[name] = key.Line
			index(m, name, val)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			name := fmt.Sprintf("%s[%d]", prefix, i)
			m[name] = item.Line
			index(m, name, item)
		}
	}
}
