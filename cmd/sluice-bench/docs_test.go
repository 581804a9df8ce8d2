package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocCommandsParse: every sluice-bench command README.md and docs/
// show, `(cd cmd/sluice-bench && [flock …] go run . ARGS)`, names flags
// and rows the bench accepts (they take minutes to hours to run: the
// options are what a test can hold them to).
func TestDocCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../CONTRIBUTING.md")
	re := regexp.MustCompile(`\(cd cmd/sluice-bench && (?:flock \S+ )?go run \.((?: [^)\s]+)*)\)`)
	n := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			n++
			args := strings.Fields(m[1])
			if _, err := parseOptions(args, io.Discard); err != nil {
				t.Errorf("%s: go run .%s: %v", file, m[1], err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d sluice-bench commands in the docs: the pattern no longer matches them", n)
	}
}
