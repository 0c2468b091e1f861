package quotaview

import (
	_ "embed"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"
)

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":         formatDuration,
	"spark":       spark,
	"pct":         func(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" },
	"clock":       func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"counterRows": counterRows,
}).Parse(pageHTML))

// counterRows renders the counters' table rows. There may be thousands,
// so they are written here rather than by the template, whose escaping
// costs ten times more; every value from the store goes through
// template.HTMLEscapeString, which is safe in text and quoted attributes.
func counterRows(d pageData) template.HTML {
	var b strings.Builder
	b.Grow(len(d.Counters) * 600)
	esc := template.HTMLEscapeString
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, c := range d.Counters {
		scope, limit, key := esc(c.Scope), esc(c.Limit), esc(c.Key)
		b.WriteString(`<tr class="counter" data-scope="` + scope + `" data-limit="` + limit + `" data-key="` + key +
			`" data-remaining="` + num(c.Remaining) + `" data-used="` + num(c.Used) + `"><td>` + scope + `</td><td>` + limit +
			` <span class="muted">` + esc(c.Algorithm) + `</span></td><td><code>`)
		if c.Key == "" {
			b.WriteString("(one counter)")
		} else {
			b.WriteString(key)
		}
		b.WriteString(`</code>`)
		if c.Fresh {
			b.WriteString(` <span class="muted">nothing used</span>`)
		}
		b.WriteString(`</td><td class="n">` + num(c.Used) + `</td><td class="n">` + num(c.Remaining) + ` / ` + num(c.Capacity) +
			`</td><td><span class="bar"><span style="width:` + frac(c.Remaining, c.Capacity) + `%"></span></span></td><td class="n">` +
			formatDuration(c.Reset) + `</td>`)
		if d.Actions {
			b.WriteString(`<td>`)
			if !c.Fresh {
				b.WriteString(`<form method="post" action="reset"><input type="hidden" name="token" value="` + esc(d.Token) +
					`"><input type="hidden" name="scope" value="` + scope + `"><input type="hidden" name="limit" value="` + limit +
					`"><input type="hidden" name="key" value="` + key + `"><input type="hidden" name="view" value="` + esc(d.Key) +
					`"><button type="submit">reset</button></form>`)
			}
			b.WriteString(`</td>`)
		}
		b.WriteString("</tr>\n")
	}
	return template.HTML(b.String())
}

// frac is a as a percentage of b, for a bar's width.
func frac(a, b int64) string {
	if b <= 0 {
		return "0"
	}
	return strconv.FormatFloat(100*float64(min(max(a, 0), b))/float64(b), 'f', 1, 64)
}

// pageData is what the template renders.
type pageData struct {
	*Snapshot
	Token     string
	Nonce     string
	RefreshMS int64
	Partial   bool
	Plots     []template.HTML
}

// render writes the page for snap (only its live part when partial).
func (h *Handler) render(w io.Writer, snap *Snapshot, partial bool, nonce string) error {
	d := pageData{Snapshot: snap, Token: h.token, Nonce: nonce, RefreshMS: h.refresh.Milliseconds(), Partial: partial}
	if tv := snap.Traffic; tv != nil {
		n := len(tv.Steps)
		allowed, waited, refused, failed := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		p50, p99, deciding, inFlight := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for i, s := range tv.Steps {
			allowed[i], waited[i], refused[i], failed[i] = float64(s.Allowed), float64(s.Waited), float64(s.Refused), float64(s.GaveUp+s.Failed+s.Fallback)
			p50[i], p99[i] = ms(s.WaitP50), ms(s.WaitP99)
			deciding[i], inFlight[i] = float64(s.Deciding), float64(s.InFlight)
		}
		per := "decisions per " + formatDuration(tv.Step)
		span := "-" + formatDuration(time.Duration(n)*tv.Step)
		d.Plots = []template.HTML{
			plot("decisions", per, "", span, 420, 150, line{"allowed", "allowed", allowed}, line{"waited", "waited", waited}, line{"refused", "refused", refused}, line{"failed/fallback", "failed", failed}),
			plot("waits", "wait, upper bound", "ms", span, 420, 150, line{"p50", "waited", p50}, line{"p99", "refused", p99}),
			plot("slots", "deciding and in flight (most per step)", "", span, 420, 150, line{"deciding", "waited", deciding}, line{"in flight", "allowed", inFlight}),
		}
	}
	name := "page"
	if partial {
		name = "live"
	}
	return page.ExecuteTemplate(w, name, d)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// formatDuration shows d to the second, or to the millisecond under a second.
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
