package policyfile

import "strings"

// lineIndex maps a rule's index in the file (-1: the document) and a
// field, as in Error.Field, to the line the file gives it on. The builder
// fills it as it reads the fields; "" is the rule itself.
type lineIndex map[int]map[string]int

func (x lineIndex) set(w at, line int) {
	m := x[w.rule]
	if m == nil {
		m = map[string]int{}
		x[w.rule] = m
	}
	if _, ok := m[w.field]; !ok {
		m[w.field] = line
	}
}

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

// within reports whether field is f or inside it ("limits[0].rate" is
// within "limits[0]" and within "", the whole rule).
func within(field, f string) bool {
	return f == "" || field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[")
}
