package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// docCommands returns the shell lines of a Markdown file a reader may
// paste: every line of its code blocks and every code span, a span that
// wraps over lines joined with spaces, a block's "\"-continued lines
// joined into one.
func docCommands(src []byte) []string {
	var out []string
	root := md.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.FencedCodeBlock, *ast.CodeBlock:
			var b strings.Builder
			lines := n.Lines()
			for i := 0; i < lines.Len(); i++ {
				seg := lines.At(i)
				b.Write(seg.Value(src))
			}
			block := strings.ReplaceAll(b.String(), "\\\n", " ")
			out = append(out, strings.Split(block, "\n")...)
			return ast.WalkSkipChildren, nil
		case *ast.CodeSpan:
			var b strings.Builder
			for c := n.FirstChild(); c != nil; c = c.NextSibling() {
				if t, ok := c.(*ast.Text); ok {
					b.Write(t.Segment.Value(src))
				}
			}
			out = append(out, strings.ReplaceAll(b.String(), "\n", " "))
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return out
}

// docFile is a page a reader runs commands from and its text.
type docFile struct {
	name string
	src  []byte
}

// docFiles is README.md, CONTRIBUTING.md and docs/*.md, read.
func docFiles(t *testing.T) []docFile {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []docFile
	for _, name := range append([]string{filepath.Join("..", "README.md"), filepath.Join("..", "CONTRIBUTING.md")}, names...) {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docFile{name, src})
	}
	return out
}

// natsCommands returns each `nats …` command of README.md and docs/*.md
// that matches sub (a regexp on the command from "nats" to the line's end),
// with the file it is in.
func natsCommands(t *testing.T, sub string) map[string][]string {
	t.Helper()
	re := regexp.MustCompile(`\bnats\s[^\n]*?` + sub + `[^\n]*`)
	found := map[string][]string{}
	for _, f := range docFiles(t) {
		for _, l := range docCommands(f.src) {
			for _, cmd := range re.FindAllString(l, -1) {
				if c, _, _ := strings.Cut(cmd, " #"); c != "" {
					cmd = c
				}
				found[f.name] = append(found[f.name], strings.TrimSpace(cmd))
			}
		}
	}
	return found
}

// TestConsumerAddRunsInAScript: every `nats consumer add` the docs show
// runs as pasted into a script — without --pull (or a deliver subject),
// --ack and --defaults the nats CLI asks its questions on the terminal and
// fails without one — and a pull consumer is not named as if it were a
// push one (CLIENTS.md's was called "pushes").
func TestConsumerAddRunsInAScript(t *testing.T) {
	n := 0
	for file, cmds := range natsCommands(t, `\bconsumer add\b`) {
		for _, cmd := range cmds {
			n++
			for _, want := range []string{"--pull", "--ack explicit", "--defaults"} {
				if !strings.Contains(cmd, want) {
					t.Errorf("%s: %q lacks %s (it prompts without it)", file, cmd, want)
				}
			}
			if f := strings.Fields(cmd[strings.Index(cmd, "consumer add"):]); len(f) < 4 || strings.HasPrefix(f[3], "-") {
				t.Errorf("%s: %q names no stream and consumer", file, cmd)
			} else if strings.Contains(strings.ToLower(f[3]), "push") {
				t.Errorf("%s: %q: the pull consumer %q is named like a push one", file, cmd, f[3])
			}
		}
	}
	if n < 2 {
		t.Fatalf("found %d `nats consumer add` commands, want CLIENTS.md's and OPERATIONS.md's: the scan sees nothing", n)
	}
}

// TestNoPagingStreamView: the docs read stored hooks with commands that
// print and exit — `nats stream view` pages, waiting on the terminal for
// "next page", so a script (or a paste with more lines after it) hangs or
// fails there; `nats stream get HOOKS <seq>` (or --last-for SUBJECT) and
// `nats stream info HOOKS` do not.
func TestNoPagingStreamView(t *testing.T) {
	for file, cmds := range natsCommands(t, `\bstream view\b`) {
		for _, cmd := range cmds {
			t.Errorf("%s: %q pages on a terminal; use nats stream get HOOKS <seq> (or --last-for SUBJECT)", file, cmd)
		}
	}
	if len(natsCommands(t, `\bstream get\b`)) == 0 {
		t.Fatal("no `nats stream get` in the docs: the scan sees nothing")
	}
}

// TestNoBackgroundedLists: `a && b &` puts the whole list in the
// background as a subshell, so `kill %1` stops that shell, not b, which
// may go on writing (a BACKUP.md run failed to remove the data dir of the
// node its kill had not stopped). A program started in the background is
// started on a line of its own.
func TestNoBackgroundedLists(t *testing.T) {
	list := regexp.MustCompile(`(&&|\|\|)[^&|#]*[^&]&\s*(#.*)?$`)
	seen := 0
	for _, f := range docFiles(t) {
		for _, l := range docCommands(f.src) {
			if strings.HasSuffix(strings.TrimSpace(strings.SplitN(l, "#", 2)[0]), "&") {
				seen++
			}
			if list.MatchString(l) {
				t.Errorf("%s: %q backgrounds a list: start the program on a line of its own", f.name, l)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no command started in the background in the docs: the scan sees nothing")
	}
}

// TestGoTestCommandsNameRealTests: every `go test` the docs show (in a
// block or a code span) names packages that exist, and the tests its
// -run or -fuzz names exist in them — a renamed package or test would
// otherwise leave a command that runs nothing and passes (`go test ./edge`
// outlived the edge package's rename to httpapi).
func TestGoTestCommandsNameRealTests(t *testing.T) {
	cmdRe := regexp.MustCompile(`go test\s[^;&|#]*`)
	nameRe := regexp.MustCompile(`^['"]?\^?([A-Za-z][A-Za-z0-9_]*)`)
	n := 0
	for _, f := range docFiles(t) {
		for _, l := range docCommands(f.src) {
			for _, cmd := range cmdRe.FindAllString(l, -1) {
				fields := strings.Fields(cmd)
				var pkgs, names []string
				for i, a := range fields {
					switch {
					case strings.HasPrefix(a, "./"):
						a = strings.TrimRight(a, "`),.;")
						pkgs = append(pkgs, strings.TrimSuffix(strings.TrimSuffix(a, "..."), "/"))
					case (a == "-run" || a == "-fuzz") && i+1 < len(fields):
						if m := nameRe.FindStringSubmatch(fields[i+1]); m != nil && fields[i+1] != "'^$'" {
							names = append(names, m[1])
						}
					}
				}
				for _, p := range pkgs {
					n++
					dir := filepath.Join("..", p)
					tests, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
					if p != "." && len(tests) == 0 {
						t.Errorf("%s: `%s`: %s has no tests (no such package?)", f.name, strings.TrimSpace(cmd), p)
						continue
					}
					for _, name := range names {
						re := regexp.MustCompile(`func (Test|Fuzz|Benchmark|Example)\w*` + name)
						if regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)`).MatchString(name) {
							re = regexp.MustCompile(`func ` + name)
						}
						if p != "." && !anyFileMatches(t, tests, re) {
							t.Errorf("%s: `%s`: no test of %s matches %s", f.name, strings.TrimSpace(cmd), p, name)
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no `go test ./…` found: the pattern no longer matches the docs")
	}
}

// anyFileMatches reports whether one of files matches re.
func anyFileMatches(t *testing.T, files []string, re *regexp.Regexp) bool {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if re.Match(b) {
			return true
		}
	}
	return false
}
