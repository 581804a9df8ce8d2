package testkit

import (
	"io"
	"strings"
)

// ScrapeLine fetches base + "/metrics" (a node's HTTP listener) and
// returns the line of the unlabelled sample name, "name value"; "" when
// there is none. The request is bounded by RequestTimeout.
func ScrapeLine(t T, base, name string) string {
	t.Helper()
	res, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("testkit: scrape %s: %v", base, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("testkit: scrape %s: %v", base, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}
