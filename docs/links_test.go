// Package docs holds no code: its test keeps the links of README.md and
// docs/*.md true. Every relative link must name a file or directory of the
// repository, and every #anchor into a Markdown file must match one of that
// file's headings as GitHub slugs it.
package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// mdDoc is one parsed Markdown file: its links and its headings' anchors.
type mdDoc struct {
	links   []string
	anchors map[string]bool
}

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

func parseDoc(src []byte) mdDoc {
	d := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	root := md.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			slug := githubSlug(plainText(n, src))
			if k := seen[slug]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		case *ast.Link:
			d.links = append(d.links, string(n.Destination))
		case *ast.Image:
			d.links = append(d.links, string(n.Destination))
		}
		return ast.WalkContinue, nil
	})
	return d
}

// plainText is a node's text as GitHub renders it: code spans, emphasis
// and link texts included, markup left out.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading (github-slugger): lower
// case, every character but letters, digits, marks, '_', '-' and spaces
// dropped, each space a '-'. Duplicates get "-1", "-2" (parseDoc).
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Leaves through a hub outage":                           "leaves-through-a-hub-outage",
		"sluice vs Redis, one machine, one run":                 "sluice-vs-redis-one-machine-one-run",
		"Where a hook's CPU goes":                               "where-a-hooks-cpu-goes",
		"sluice — design, for the people who carry it on":       "sluice--design-for-the-people-who-carry-it-on",
		"Leaf mode: a NATS leaf node with an outbox (issue 14)": "leaf-mode-a-nats-leaf-node-with-an-outbox-issue-14",
		"POST /v1/hooks/{tenant}/{source}":                      "post-v1hookstenantsource",
		"Tenant records and snapshots (tenants/)":               "tenant-records-and-snapshots-tenants",
		"Roles and tenant-scoped subjects (NATS)":               "roles-and-tenant-scoped-subjects-nats",
		"Extensions (additive; nothing above changed)":          "extensions-additive-nothing-above-changed",
		"NATS (service sluice, nats.go micro, $SRV.PING)":       "nats-service-sluice-natsgo-micro-srvping",
		"Claims in KV: what each write is":                      "claims-in-kv-what-each-write-is",
		"Testing against sluice, consuming stored hooks":        "testing-against-sluice-consuming-stored-hooks",
		"Failure semantics":                                     "failure-semantics",
		"The NATS protocol, from any language":                  "the-nats-protocol-from-any-language",
		"Declarative verification":                              "declarative-verification",
		"Memory and disk per live claim":                        "memory-and-disk-per-live-claim",
		"What is in the box":                                    "what-is-in-the-box",
		"Heading with `code` and *emphasis* (parsed below)":     "heading-with-code-and-emphasis-parsed-below",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
	d := parseDoc([]byte("# Heading with `code` and *emphasis* (parsed below)\n\n## Twice\n\n## Twice\n"))
	for _, a := range []string{"heading-with-code-and-emphasis-parsed-below", "twice", "twice-1"} {
		if !d.anchors[a] {
			t.Errorf("anchor %q missing from %v", a, d.anchors)
		}
	}
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// TestLinks checks every relative link of README.md and docs/*.md.
func TestLinks(t *testing.T) {
	var files []string
	for _, f := range docFiles(t) {
		files = append(files, f.name)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	docs := map[string]mdDoc{} // by cleaned path
	load := func(path string) (mdDoc, error) {
		path = filepath.Clean(path)
		if d, ok := docs[path]; ok {
			return d, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return mdDoc{}, err
		}
		d := parseDoc(src)
		docs[path] = d
		return d, nil
	}
	checked := 0
	for _, file := range files {
		d, err := load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range d.links {
			if scheme.MatchString(link) || strings.HasPrefix(link, "//") {
				continue // external
			}
			checked++
			target, frag, _ := strings.Cut(link, "#")
			if target, err = url.PathUnescape(target); err != nil {
				t.Errorf("%s: link %q: %v", file, link, err)
				continue
			}
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no such file %s", file, link, path)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			td, err := load(path)
			if err != nil {
				t.Errorf("%s: link %q: %v", file, link, err)
				continue
			}
			if frag, _ = url.PathUnescape(frag); !td.anchors[strings.ToLower(frag)] {
				t.Errorf("%s: link %q: no heading in %s has the anchor #%s", file, link, path, frag)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser sees nothing")
	}
	t.Logf("%d relative links in %d files checked", checked, len(files))
}

// TestBuildOutputsAreFiles: every `go build -o NAME` in README.md and
// docs/*.md, run at the root of a clone, writes the file NAME — not into a
// directory of the repository called NAME (`go build -o edge` once wrote
// the binary into the edge/ package and `./edge` then failed).
func TestBuildOutputsAreFiles(t *testing.T) {
	out := regexp.MustCompile(`go build\b[^\n` + "`" + `]*?\s-o\s+(\S+)`)
	n := 0
	for _, f := range docFiles(t) {
		for _, m := range out.FindAllStringSubmatch(string(f.src), -1) {
			n++
			if fi, err := os.Stat(filepath.Join("..", m[1])); err == nil && fi.IsDir() {
				t.Errorf("%s: `go build -o %s` writes into the directory %s/, not a binary %s", f.name, m[1], m[1], m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no `go build -o` line found: the pattern no longer matches the docs")
	}
}
