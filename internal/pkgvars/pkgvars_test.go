// Package pkgvars holds DESIGN.md's "Options" rules with tests (the
// option types, config structs, and no mutable package variables); it
// has no code.
package pkgvars

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// allowed are the exported package variables the rule lets stand, each
// with its reason (package.Name).
var allowed = map[string]string{
	"service.Version":   "set at build time with -ldflags -X, which needs a variable",
	"protocol.Errors":   "the error table newError fills as the codes are declared",
	"protocol.newError": "the error codes, the table's entries (issue 41 item 5 reworks the table)",
}

// TestNoMutablePackageVars parses every non-test Go file of the module and
// fails on an exported package-level var that is not an error sentinel
// (errors.New, fmt.Errorf, a type assertion to error, Err… = pkg.Err…),
// a compiled regexp,
// a sync or atomic value, an fx module (go.uber.org/fx's Options or
// Module, imported as fx or uberfx), or in allowed.
// Unexported vars (lookup tables, pools, interface checks) are the
// package's own and are not held here.
func TestNoMutablePackageVars(t *testing.T) {
	fset, files := moduleFiles(t, false)
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !name.IsExported() {
						continue
					}
					var value ast.Expr
					if i < len(vs.Values) {
						value = vs.Values[i]
					}
					id := f.Name.Name + "." + name.Name
					if call, ok := value.(*ast.CallExpr); ok {
						if fn, ok := call.Fun.(*ast.Ident); ok && allowed[f.Name.Name+"."+fn.Name] != "" {
							continue // a value of an allowed constructor
						}
					}
					if allowed[id] == "" && !exempt(name.Name, vs.Type, value) {
						t.Errorf("%s: package variable %s: make it a constant or a function returning a fresh value, or allow it with a reason", fset.Position(name.Pos()), id)
					}
				}
			}
		}
	}
}

// moduleFiles parses every non-test Go file of the module outside
// testdata (and outside internal/ directories with skipInternal).
func moduleFiles(t *testing.T, skipInternal bool) (*token.FileSet, []*ast.File) {
	t.Helper()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || (skipInternal && n == "internal")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("parsed %d files: is the module root %s?", len(files), root)
	}
	return fset, files
}

// exempt reports whether var name of type typ (or nil) and value (or nil)
// is of a kind the rule lets stand.
func exempt(name string, typ, value ast.Expr) bool {
	if s, ok := value.(*ast.SelectorExpr); ok && strings.HasPrefix(name, "Err") && strings.HasPrefix(s.Sel.Name, "Err") {
		return true // another package's sentinel
	}
	if ta, ok := value.(*ast.TypeAssertExpr); ok {
		if id, ok := ta.Type.(*ast.Ident); ok && id.Name == "error" {
			return true
		}
	}
	if call, ok := value.(*ast.CallExpr); ok {
		switch selector(call.Fun) {
		case "errors.New", "fmt.Errorf", "regexp.MustCompile", "fx.Options", "fx.Module", "uberfx.Options", "uberfx.Module":
			return true
		}
	}
	if sel := selector(typ); strings.HasPrefix(sel, "sync.") || strings.HasPrefix(sel, "atomic.") {
		return true
	}
	return false
}

// selector is "pkg.Name" for e = pkg.Name, else "".
func selector(e ast.Expr) string {
	if s, ok := e.(*ast.SelectorExpr); ok {
		if x, ok := s.X.(*ast.Ident); ok {
			return x.Name + "." + s.Sel.Name
		}
	}
	return ""
}
