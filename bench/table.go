package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// table is a markdown table: a left-aligned first column and
// right-aligned others.
type table struct {
	head []string
	rows [][]string
}

// row adds a row.
func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// write prints the table, with an empty line after it.
func (t *table) write(w io.Writer) {
	line := func(cells []string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }
	line(t.head)
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---:"
	}
	seps[0] = "---"
	line(seps)
	for _, r := range t.rows {
		line(r)
	}
	fmt.Fprintln(w)
}

// ratio formats x/base, or "–" when base is zero.
func ratio(x, base float64) string {
	if base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", x/base)
}

// micros formats d in whole microseconds.
func micros(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e3) }

// millis formats d in milliseconds, with one decimal.
func millis(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }

// percent formats a share as a percentage.
func percent(share float64) string { return fmt.Sprintf("%.1f%%", 100*share) }
