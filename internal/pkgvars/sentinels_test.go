package pkgvars

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// contractSentinels are the errors only protocol declares: every package's
// unavailable or invalid-option error wraps protocol's (docs/DESIGN.md
// "Options"), so errors.Is with one sentinel tells any of them.
var contractSentinels = map[string]bool{"ErrUnavailable": true, "ErrInvalidOption": true}

// TestOneSentinelEach: no package but protocol declares an exported
// ErrUnavailable or ErrInvalidOption, internal ones included.
func TestOneSentinelEach(t *testing.T) {
	fset, files := moduleFiles(t, false)
	declared := map[string][]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if contractSentinels[n.Name] {
						pos := fset.Position(n.Pos())
						declared[n.Name] = append(declared[n.Name], filepath.ToSlash(pos.Filename)+": "+f.Name.Name)
					}
				}
			}
		}
	}
	for name := range contractSentinels {
		got := declared[name]
		if len(got) != 1 || filepath.Base(filepath.Dir(got[0])) != "protocol" {
			t.Errorf("%s declared in %v, want in protocol only", name, got)
		}
	}
}

// TestEveryPackageHasADoc (issue 50): every package with non-test Go files
// says what it owns in a package comment ("// Package x …").
func TestEveryPackageHasADoc(t *testing.T) {
	fset, files := moduleFiles(t, false)
	has := map[string]bool{}
	for _, f := range files {
		name := fset.Position(f.Pos()).Filename
		dir := filepath.ToSlash(filepath.Dir(name))
		if _, ok := has[dir]; !ok {
			has[dir] = false
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ") || f.Name.Name == "main" && f.Doc != nil {
			has[dir] = true
		}
	}
	for dir, ok := range has {
		if !ok {
			t.Errorf("%s: no package comment (\"// Package … \")", dir)
		}
	}
}
