package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

func TestRenderSVG(t *testing.T) {
	rows := []summaryRow{
		{Workload: "hit+claim", Inflight: 64, A: "sluice", B: "redis", AOpsPerS: spread{Median: 20000}, BOpsPerS: spread{Median: 40000}, AP99Us: spread{Median: 9000}, BP99Us: spread{Median: 4500}},
		{Workload: "edge <http>", Inflight: 32, A: "edge", B: "floor", AOpsPerS: spread{Median: 4000}, BOpsPerS: spread{Median: math.NaN()}, AP99Us: spread{Median: 18000}, BP99Us: spread{Median: 0}},
	}
	out := renderSVG(rows)
	// Well-formed XML; count the bars and their widths.
	dec := xml.NewDecoder(bytes.NewReader(out))
	var widths []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, out)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "width" && a.Value != "10" {
					widths = append(widths, a.Value)
				}
			}
		}
	}
	// The background, then 4 bars for row 1 and 2 for row 2 (two values missing).
	want := []string{"1000", "150.0", "300.0", "150.0", "75.0", "30.0", "300.0"}
	if strings.Join(widths, " ") != strings.Join(want, " ") {
		t.Fatalf("rect widths %v, want %v\n%s", widths, want, out)
	}
	if !bytes.Contains(out, []byte("edge &lt;http&gt;, 32 in flight (edge vs floor)")) || bytes.Count(out, []byte("n/a")) != 2 {
		t.Fatalf("labels:\n%s", out)
	}
}
