package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goDecls is what the module's Go files declare: per package name (the
// last element of its directory), its top-level names; per type name, its
// methods and fields, across packages; and every file's base name.
type goDecls struct {
	pkgs    map[string]map[string]bool // package → top-level names
	members map[string]map[string]bool // "pkg.Type" → methods, fields
	types   map[string][]string        // Type → packages declaring it
	files   map[string]bool            // base names of .go files
	paths   map[string]bool            // paths of .go files from the root
}

func parseModule(t *testing.T) goDecls {
	t.Helper()
	d := goDecls{pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{}, types: map[string][]string{}, files: map[string]bool{}, paths: map[string]bool{}}
	add := func(m map[string]map[string]bool, k, name string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][name] = true
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		d.files[e.Name()] = true
		rel, _ := filepath.Rel("..", path)
		d.paths[filepath.ToSlash(rel)] = true
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.Base(filepath.Dir(path))
		if pkg == ".." {
			pkg = f.Name.Name
		}
		if d.pkgs[pkg] == nil {
			d.pkgs[pkg] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					add(d.pkgs, pkg, decl.Name.Name)
					continue
				}
				recv := decl.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if ix, ok := recv.(*ast.IndexExpr); ok {
					recv = ix.X
				}
				if ix, ok := recv.(*ast.IndexListExpr); ok {
					recv = ix.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					add(d.members, pkg+"."+id.Name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							add(d.pkgs, pkg, n.Name)
						}
					case *ast.TypeSpec:
						add(d.pkgs, pkg, spec.Name.Name)
						d.types[spec.Name.Name] = append(d.types[spec.Name.Name], pkg)
						key := pkg + "." + spec.Name.Name
						add(d.members, key, "")
						var fields *ast.FieldList
						switch tt := spec.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields
						case *ast.InterfaceType:
							fields = tt.Methods
						}
						if fields != nil {
							for _, fl := range fields.List {
								for _, n := range fl.Names {
									add(d.members, key, n.Name)
								}
								if len(fl.Names) == 0 { // embedded: its name
									typ := fl.Type
									if s, ok := typ.(*ast.StarExpr); ok {
										typ = s.X
									}
									switch e := typ.(type) {
									case *ast.Ident:
										add(d.members, key, e.Name)
									case *ast.SelectorExpr:
										add(d.members, key, e.Sel.Name)
									}
								}
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// hasMember reports whether pkg's type typ (or, with pkg "", any
// package's type of that name) has the method or field name.
func (d goDecls) hasMember(pkg, typ, name string) bool {
	pkgs := []string{pkg}
	if pkg == "" {
		pkgs = d.types[typ]
	}
	for _, p := range pkgs {
		if d.members[p+"."+typ][name] {
			return true
		}
	}
	return false
}

// fileIn reports whether dir (or a directory below it) has a Go file of
// that base name.
func (d goDecls) fileIn(dir, base string) bool {
	for p := range d.paths {
		if strings.HasPrefix(p, dir+"/") && filepath.Base(p) == base {
			return true
		}
	}
	return false
}

// TestNamesExist (issue 50): every Go file and identifier README.md and
// DESIGN.md name in code spans exists — `hook.go` is some file of the
// module, of the package a table row starts with where it does (| `quota`
// | `router.go` …); `claims.Store.Settle`, `durability.Start` and `Fleet.Hit` are
// declared (a package's name, then a top-level name, then a method or
// field; or one of the module's types, then its method or field). Names
// of other modules (`atomic.Pointer`, `jetstream.KeyValueConfig`) start
// with no package or type of this module and are not checked; bare
// words are not checked.
func TestNamesExist(t *testing.T) {
	d := parseModule(t)
	span := regexp.MustCompile("`([^`\n]+)`")
	name := regexp.MustCompile(`^\*?([A-Za-z_]\w*)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\(.*\))?$`)
	goFile := regexp.MustCompile(`^[\w.-]+\.go$`)
	rowPackage := regexp.MustCompile("^\\| `([a-z][\\w/]*?)/?`")
	n := 0
	check := func(doc, s string) {
		p := name.FindStringSubmatch(s)
		if p == nil {
			return
		}
		switch top := d.pkgs[p[1]]; {
		case top != nil && !ast.IsExported(p[2]):
			// claims.settle, quota.hit: subjects, not Go names
		case top != nil:
			n++
			if !top[p[2]] {
				t.Errorf("%s names %s: package %s declares no %s", doc, s, p[1], p[2])
			} else if p[3] != "" && !d.hasMember(p[1], p[2], p[3]) {
				t.Errorf("%s names %s: %s.%s has no method or field %s", doc, s, p[1], p[2], p[3])
			}
		case len(d.types[p[1]]) > 0 && p[3] == "":
			n++
			if !d.hasMember("", p[1], p[2]) {
				t.Errorf("%s names %s: no type %s of the module has a method or field %s", doc, s, p[1], p[2])
			}
		}
	}
	for _, doc := range []string{"../README.md", "DESIGN.md"} {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			dir := ""
			if r := rowPackage.FindStringSubmatch(line); r != nil {
				if _, err := os.Stat(filepath.Join("..", r[1])); err == nil {
					dir = r[1]
				}
			}
			for _, m := range span.FindAllStringSubmatch(line, -1) {
				s := strings.TrimSpace(m[1])
				if goFile.MatchString(s) {
					n++
					if dir != "" && !d.fileIn(dir, s) {
						t.Errorf("%s names %s in %s's row: no such Go file in %s/", doc, s, dir, dir)
					} else if !d.files[s] {
						t.Errorf("%s names %s: no such Go file in the module", doc, s)
					}
					continue
				}
				check(doc, s)
			}
		}
	}
	if n < 60 {
		t.Fatalf("checked only %d names: the patterns no longer match", n)
	}
}
