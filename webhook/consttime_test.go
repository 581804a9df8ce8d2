package webhook_test

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMACsCompareInConstantTime reads the package's own source (its
// non-test files, type-checked) and fails on any comparison that could
// leak, by its timing, how much of a presented signature, token or digest
// matched: a MAC compared with == (as a string, or as a byte array such as
// a sha256.Sum256), bytes.Equal and the like, or hmac.Equal / crypto/subtle
// called anywhere but equalMAC. equalMAC must be hmac.Equal of its two
// arguments, and each verifying function must compare through it. A
// timing test could not tell == from hmac.Equal on this machine; the
// source can.
func TestMACsCompareInConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", exportData(t))}
	if _, err := conf.Check("github.com/sluice-dev/sluice/webhook", fset, files, info); err != nil {
		t.Fatalf("type-checking the package: %v", err)
	}

	// funcOf is the package-level function a call's callee resolves to
	// ("crypto/hmac.Equal", "webhook.equalMAC"; "" for anything else).
	funcOf := func(call *ast.CallExpr) string {
		var id *ast.Ident
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			id = fn
		case *ast.SelectorExpr:
			id = fn.Sel
		default:
			return ""
		}
		f, ok := info.Uses[id].(*types.Func)
		if !ok || f.Pkg() == nil {
			return ""
		}
		if sig, _ := f.Type().(*types.Signature); sig != nil && sig.Recv() != nil {
			return ""
		}
		if f.Pkg().Path() == "github.com/sluice-dev/sluice/webhook" {
			return "webhook." + f.Name()
		}
		return f.Pkg().Path() + "." + f.Name()
	}
	isConst := func(e ast.Expr) bool {
		tv := info.Types[e]
		return tv.Value != nil || tv.IsNil()
	}
	isBytes := func(e ast.Expr) bool {
		var elem types.Type
		tv, ok := info.Types[e]
		if !ok || tv.Type == nil {
			return false
		}
		switch u := tv.Type.Underlying().(type) {
		case *types.Slice:
			elem = u.Elem()
		case *types.Array:
			elem = u.Elem()
		default:
			return false
		}
		b, ok := elem.Underlying().(*types.Basic)
		return ok && b.Kind() == types.Byte
	}
	// secretLike: an operand that is bytes, bytes made a string, or bytes
	// encoded (what a MAC or digest looks like at a comparison).
	secretLike := func(e ast.Expr) bool {
		e = ast.Unparen(e)
		if isBytes(e) {
			return true
		}
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		if tv := info.Types[call.Fun]; tv.IsType() && len(call.Args) == 1 && isBytes(call.Args[0]) {
			return true // string(b)
		}
		name := funcOf(call)
		if name == "" {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				name = sel.Sel.Name // a method: base64.StdEncoding.EncodeToString
			}
		}
		return strings.HasPrefix(name, "encoding/hex.") || strings.HasSuffix(name, "EncodeToString")
	}
	banned := map[string]bool{
		"bytes.Equal": true, "bytes.Compare": true, "slices.Equal": true, "slices.Compare": true,
		"reflect.DeepEqual": true, "strings.Compare": true,
	}

	calls := map[string]map[string]bool{} // function → what it calls
	sawEqualMAC := false
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			calls[name] = map[string]bool{}
			if name == "equalMAC" && fd.Recv == nil {
				sawEqualMAC = true
				checkEqualMAC(t, fset, fd, funcOf, info)
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if n == nil {
					return false
				}
				at := fset.Position(n.Pos())
				switch n := n.(type) {
				case *ast.CallExpr:
					callee := funcOf(n)
					calls[name][callee] = true
					switch {
					case banned[callee]:
						t.Errorf("%s: %s in %s: a comparison that is not constant time; compare MACs with equalMAC", at, callee, name)
					case callee == "strings.EqualFold" && !isConst(n.Args[0]) && !isConst(n.Args[1]):
						t.Errorf("%s: strings.EqualFold of two variables in %s: compare MACs with equalMAC", at, name)
					case (callee == "crypto/hmac.Equal" || strings.HasPrefix(callee, "crypto/subtle.")) && name != "equalMAC":
						t.Errorf("%s: %s in %s: compare through equalMAC, the package's one comparison", at, callee, name)
					}
				case *ast.BinaryExpr:
					if n.Op != token.EQL && n.Op != token.NEQ {
						break
					}
					if isConst(n.X) || isConst(n.Y) {
						break // against a constant: no secret to leak
					}
					if secretLike(n.X) || secretLike(n.Y) {
						t.Errorf("%s: %s compares bytes with %s in %s: not constant time; compare MACs with equalMAC", at, exprString(fset, n), n.Op, name)
					}
				}
				return true
			})
		}
	}
	if !sawEqualMAC {
		t.Fatal("no func equalMAC in the package: the verifiers' one comparison is gone")
	}
	// Each verifying function's final comparison goes through equalMAC
	// (directly, or by equalDigest).
	for fn, via := range map[string]string{
		"verifyHMAC":  "webhook.equalMAC",
		"equalDigest": "webhook.equalMAC",
		"verifyToken": "webhook.equalDigest",
		"verifyBasic": "webhook.equalDigest",
	} {
		if c, ok := calls[fn]; !ok {
			t.Errorf("no function %s: update this test's list of verifying functions", fn)
		} else if !c[via] {
			t.Errorf("%s does not compare through %s", fn, strings.TrimPrefix(via, "webhook."))
		}
	}
}

// checkEqualMAC fails unless fd is `return hmac.Equal(a, b)` of its two
// parameters, in order.
func checkEqualMAC(t *testing.T, fset *token.FileSet, fd *ast.FuncDecl, funcOf func(*ast.CallExpr) string, info *types.Info) {
	t.Helper()
	var params []types.Object
	for _, fl := range fd.Type.Params.List {
		for _, n := range fl.Names {
			params = append(params, info.Defs[n])
		}
	}
	ok := len(fd.Body.List) == 1 && len(params) == 2
	if ok {
		ret, isRet := fd.Body.List[0].(*ast.ReturnStmt)
		ok = isRet && len(ret.Results) == 1
		if ok {
			call, isCall := ret.Results[0].(*ast.CallExpr)
			ok = isCall && funcOf(call) == "crypto/hmac.Equal" && len(call.Args) == 2
			for i := 0; ok && i < 2; i++ {
				id, isID := call.Args[i].(*ast.Ident)
				ok = isID && info.Uses[id] == params[i]
			}
		}
	}
	if !ok {
		t.Errorf("%s: equalMAC must be `return hmac.Equal(presented, want)` of its two parameters", fset.Position(fd.Pos()))
	}
}

// exportData is an importer lookup that opens each dependency's export
// data, as `go list -export` (the build cache) names it.
func exportData(t *testing.T) func(path string) (io.ReadCloser, error) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "="); ok && file != "" {
			files[path] = file
		}
	}
	return func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	}
}

func exprString(fset *token.FileSet, e ast.Expr) string {
	src, err := os.ReadFile(fset.Position(e.Pos()).Filename)
	if err != nil {
		return "?"
	}
	return string(src[fset.Position(e.Pos()).Offset:fset.Position(e.End()).Offset])
}
