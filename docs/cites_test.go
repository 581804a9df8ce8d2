package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sources returns the repository's Go files and Markdown docs (README.md,
// CONTRIBUTING.md, docs/*.md), paths relative to the repository root, and
// reads each with its comment markers ("//" at a line's start) folded away,
// so that a citation broken over comment lines reads as one.
func sources(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fold := regexp.MustCompile(`\n[ \t]*//[ \t]?`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		md := strings.HasSuffix(rel, ".md") && (filepath.Dir(rel) == "." || filepath.Dir(rel) == "docs")
		if !strings.HasSuffix(rel, ".go") && !md {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = fold.ReplaceAllString(string(src), " ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSectionCites: every section of DESIGN.md the code and the docs cite
// by its quoted title after the file's name names a section there — a
// heading whose anchor starts with the title's — so that rewriting
// DESIGN.md cannot leave a comment pointing at a section that is gone.
func TestSectionCites(t *testing.T) {
	src, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	design := parseDoc(src)
	cite := regexp.MustCompile(`DESIGN\.md[ ,]*"([^"\n]+)"`)
	n := 0
	for file, text := range sources(t) {
		for _, m := range cite.FindAllStringSubmatch(text, -1) {
			n++
			slug := githubSlug(m[1])
			found := false
			for a := range design.anchors {
				if strings.HasPrefix(a, slug) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s cites DESIGN.md %q: no such section", file, m[1])
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d citations of DESIGN.md sections: the pattern no longer matches", n)
	}
}

// TestPathCites: every file (.go, .md) and internal package of the
// repository named in the code or the docs (`service/fastdecode.go`,
// `internal/retry`: a path whose first element is one of the repository's
// top-level directories) exists. Paths of other projects (nats-server's
// `server/filestore.go`) start elsewhere and are not checked; nor is
// CHANGELOG.md, which names what was.
func TestPathCites(t *testing.T) {
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	var tops []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			tops = append(tops, regexp.QuoteMeta(e.Name()))
		}
	}
	// A path: a top-level directory, then /-separated names; it ends at a
	// character no path here holds. "internal/names" and
	// "quota/owner/settle.go" are paths; "quota/owner's" is the package
	// quota/owner.
	path := regexp.MustCompile(`(?:^|[\s(` + "`" + `"'])((?:` + strings.Join(tops, "|") + `)(?:/[A-Za-z0-9_.-]*[A-Za-z0-9_-])+)`)
	selector := regexp.MustCompile(`\.[A-Z]\w*$`) // internal/jstest.Start: the package
	n := 0
	for file, text := range sources(t) {
		for _, m := range path.FindAllStringSubmatch(text, -1) {
			p := selector.ReplaceAllString(m[1], "")
			stem := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
			if file == "CHANGELOG.md" || strings.ContainsAny(p, "<>*{}") || len(stem) == 1 || // docs/X.md: a placeholder
				!(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md") || strings.Contains("/"+p+"/", "/internal/")) {
				continue
			}
			n++
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(p))); err != nil {
				t.Errorf("%s names %s: no such file or directory", file, p)
			}
		}
	}
	if n < 50 {
		t.Fatalf("found only %d paths: the pattern no longer matches", n)
	}
}

// TestDesignIsAMap: DESIGN.md stays a map a newcomer reads top to bottom
// (issue 41): at most 400 lines. Figures go to BENCHMARKS.md, test lists
// to the tests.
func TestDesignIsAMap(t *testing.T) {
	src, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 400 {
		t.Fatalf("DESIGN.md has %d lines, at most 400: move figures to BENCHMARKS.md, detail to the code's comments", n)
	}
}
