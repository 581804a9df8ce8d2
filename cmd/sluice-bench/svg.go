package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
)

// The --svg chart: for every summary row, the median ops/s and the median
// p99 of both systems (sluice and Redis, or the edge and its floor) as
// horizontal bars, in two panels, each scaled to its largest value. Plain
// SVG 1.1 written by hand: no dependency, readable in a browser or a
// README.

const (
	svgLabelW = 280 // row labels (about 6 px a character)
	svgPanelW = 300 // one panel's bars
	svgGap    = 40  // between panels
	svgBarH   = 12
	svgRowH   = 2*svgBarH + 14
	svgTop    = 46
	svgColorA = "#2f6db5" // sluice (A)
	svgColorB = "#d0563b" // Redis / floor (B)
)

// renderSVG draws rows as the chart described above.
func renderSVG(rows []summaryRow) []byte {
	var maxOps, maxP99 float64
	for _, r := range rows {
		for _, v := range []float64{r.AOpsPerS.Median, r.BOpsPerS.Median} {
			if !math.IsNaN(v) {
				maxOps = max(maxOps, v)
			}
		}
		for _, v := range []float64{r.AP99Us.Median, r.BP99Us.Median} {
			if !math.IsNaN(v) {
				maxP99 = max(maxP99, v)
			}
		}
	}
	width := svgLabelW + 2*svgPanelW + svgGap + 80
	height := svgTop + len(rows)*svgRowH + 30
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	x1 := svgLabelW
	x2 := svgLabelW + svgPanelW + svgGap
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">ops/s (median, longer is better)</text>`+"\n", x1)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">p99 µs (median, shorter is better)</text>`+"\n", x2)
	fmt.Fprintf(&b, `<rect x="%d" y="24" width="10" height="10" fill="%s"/><text x="%d" y="33">sluice</text>`+"\n", x1, svgColorA, x1+14)
	fmt.Fprintf(&b, `<rect x="%d" y="24" width="10" height="10" fill="%s"/><text x="%d" y="33">Redis / floor</text>`+"\n", x1+70, svgColorB, x1+84)
	for i, r := range rows {
		y := svgTop + i*svgRowH
		label := fmt.Sprintf("%s, %d in flight (%s vs %s)", r.Workload, r.Inflight, r.A, r.B)
		fmt.Fprintf(&b, `<text x="4" y="%d">%s</text>`+"\n", y+svgBarH+4, html.EscapeString(label))
		svgBar(&b, x1, y, r.AOpsPerS.Median, maxOps, svgColorA, "%.0f")
		svgBar(&b, x1, y+svgBarH+1, r.BOpsPerS.Median, maxOps, svgColorB, "%.0f")
		svgBar(&b, x2, y, r.AP99Us.Median, maxP99, svgColorA, "%.0f")
		svgBar(&b, x2, y+svgBarH+1, r.BP99Us.Median, maxP99, svgColorB, "%.0f")
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// svgBar draws one bar of value v on a scale whose full width is full,
// with its value printed after it (a missing value: no bar, "n/a").
func svgBar(b *bytes.Buffer, x, y int, v, full float64, color, format string) {
	if math.IsNaN(v) || v <= 0 || full <= 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#777">n/a</text>`+"\n", x+2, y+svgBarH-2)
		return
	}
	w := max(1, v/full*svgPanelW)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, x, y, w, svgBarH, color)
	fmt.Fprintf(b, `<text x="%.1f" y="%d">`+format+"</text>\n", float64(x)+w+3, y+svgBarH-2, v)
}

// writeSVG writes the chart of rows to path.
func writeSVG(path string, rows []summaryRow) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, renderSVG(rows), 0o644)
}
