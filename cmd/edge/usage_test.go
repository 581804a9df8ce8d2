package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxUsageColumns is the widest line `edge -h` may print: it goes to a
// terminal, where longer lines wrap mid-word (they were up to 214 columns).
const maxUsageColumns = 100

// TestHelpFitsTheTerminal: every line of `edge -h` (the flags and the
// commands after them) is at most maxUsageColumns wide.
func TestHelpFitsTheTerminal(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stderr, nil); code != 0 {
		t.Fatalf("edge -h: exit %d\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if len(lines) < 20 || !strings.Contains(stderr.String(), "Commands:") {
		t.Fatalf("edge -h printed only:\n%s", stderr.String())
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > maxUsageColumns {
			t.Errorf("line %d is %d columns (at most %d): %q", i+1, n, maxUsageColumns, l)
		}
	}
}
