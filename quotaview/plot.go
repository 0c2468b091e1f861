package quotaview

import (
	"html/template"
	"strconv"
	"strings"
)

// A line is one series of a plot.
type line struct {
	name   string
	class  string // its colour, from the page's style
	values []float64
}

// plot draws lines as an inline SVG chart, w by h pixels, with y from 0
// to the largest value; series is the chart's name for scripts and tests.
// Only numbers and fixed names go into the markup (names are escaped).
// span labels the x axis's start ("-10m"); the end is "now".
func plot(series, title, unit, span string, w, h int, lines ...line) template.HTML {
	const padL, padB, padT = 44, 16, 16
	most := 0.0
	n := 0
	for _, l := range lines {
		n = max(n, len(l.values))
		for _, v := range l.values {
			most = max(most, v)
		}
	}
	if most == 0 {
		most = 1
	}
	var b strings.Builder
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	b.WriteString(`<svg class="plot" data-series="` + template.HTMLEscapeString(series) + `" xmlns="http://www.w3.org/2000/svg" width="` + strconv.Itoa(w) + `" height="` + strconv.Itoa(h) + `" viewBox="0 0 ` + strconv.Itoa(w) + " " + strconv.Itoa(h) + `" role="img" aria-label="` + template.HTMLEscapeString(title) + `">`)
	b.WriteString(`<text x="` + strconv.Itoa(padL) + `" y="11" class="t">` + template.HTMLEscapeString(title) + `</text>`)
	x0, y0, pw, ph := float64(padL), float64(h-padB), float64(w-padL-4), float64(h-padB-padT)
	b.WriteString(`<line class="axis" x1="` + f(x0) + `" y1="` + f(y0) + `" x2="` + f(x0+pw) + `" y2="` + f(y0) + `"/>`)
	b.WriteString(`<text x="` + f(x0-4) + `" y="` + f(float64(padT)+8) + `" class="y">` + template.HTMLEscapeString(formatValue(most, unit)) + `</text>`)
	b.WriteString(`<text x="` + f(x0-4) + `" y="` + f(y0) + `" class="y">0</text>`)
	b.WriteString(`<text x="` + f(x0) + `" y="` + f(float64(h-3)) + `">` + template.HTMLEscapeString(span) + `</text>`)
	b.WriteString(`<text x="` + f(x0+pw) + `" y="` + f(float64(h-3)) + `" class="y">now</text>`)
	for _, l := range lines {
		if len(l.values) == 0 {
			continue
		}
		b.WriteString(`<polyline class="` + l.class + `" data-name="` + template.HTMLEscapeString(l.name) + `" points="`)
		for i, v := range l.values {
			x := x0
			if n > 1 {
				x += pw * float64(i) / float64(n-1)
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f(x) + "," + f(y0-ph*v/most))
		}
		b.WriteString(`"/>`)
	}
	lx := x0 + 8
	for _, l := range lines {
		b.WriteString(`<text x="` + f(lx) + `" y="` + f(float64(padT)+10) + `" class="k ` + l.class + `">` + template.HTMLEscapeString(l.name) + `</text>`)
		lx += float64(8*len(l.name) + 16)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// spark draws values (and held, in red) as a small line, 160 by 28
// pixels, without axes: the shape of a rule's traffic.
func spark(series string, values []int, held []int) template.HTML {
	const w, h = 160, 28
	most := 1
	for _, v := range values {
		most = max(most, v)
	}
	var b strings.Builder
	b.WriteString(`<svg class="plot spark" data-series="` + template.HTMLEscapeString(series) + `" xmlns="http://www.w3.org/2000/svg" width="160" height="28" viewBox="0 0 160 28">`)
	for _, l := range []struct {
		class string
		vs    []int
	}{{"allowed", values}, {"refused", held}} {
		b.WriteString(`<polyline class="` + l.class + `" points="`)
		for i, v := range l.vs {
			if i > 0 {
				b.WriteByte(' ')
			}
			x := float64(w-2) * float64(i) / float64(max(len(l.vs)-1, 1))
			b.WriteString(strconv.FormatFloat(1+x, 'f', 1, 64) + "," + strconv.FormatFloat(h-2-float64(h-4)*float64(v)/float64(most), 'f', 1, 64))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func formatValue(v float64, unit string) string {
	if unit == "ms" {
		if v >= 1000 {
			return strconv.FormatFloat(v/1000, 'f', -1, 64) + " s"
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
