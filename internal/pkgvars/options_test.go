package pkgvars

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// configs are the exported config structs DESIGN.md "Options" lets stand
// (package.Type), each with its reason: a whole configuration a command
// assembles from flags, or a server resource's, as jetstream's.
var configs = map[string]string{
	"config.Config":          "the flags, environment and YAML: what a command assembles",
	"httpapi.Config":         "the HTTP handler's, assembled by fx from the flags",
	"httpapi.ShardMapConfig": "GET /v1/shards' whole configuration, assembled by fx from the node",
	"service.Config":         "the micro service's, assembled by fx from the flags",
	"forward.Config":         "the forwarder's, assembled by fx from the flags",
	"durability.Config":      "what a 2xx waits for and what runs it, assembled by fx from the flags",
	"natsembed.ServerConfig": "an embedded server's whole configuration, as nats-server's Options",
	"kvstore.BucketConfig":   "a KV bucket, a server resource: jetstream.KeyValueConfig's form (Validate)",
	"hooks.StreamConfig":     "the hooks stream, a server resource: jetstream.StreamConfig's form",
	"hooks.OutboxConfig":     "the outbox stream, a server resource: jetstream.StreamConfig's form",
}

// TestOptionsConvention holds DESIGN.md "Options" on every non-test Go
// file outside internal/ directories: an exported …Option type is an
// interface whose methods are unexported, or a type with no exported
// method (so no other package applies it); there is no exported …Options
// settings struct; an exported …Config struct is one of configs.
func TestOptionsConvention(t *testing.T) {
	fset, files := moduleFiles(t, true)
	type typ struct {
		pos  token.Pos
		spec *ast.TypeSpec
	}
	types := map[string]typ{}                // dir:pkg.Type
	exportedMethods := map[string][]string{} // dir:pkg.Type → exported method names
	for _, f := range files {
		if f.Name.Name == "main" {
			continue
		}
		pkg := filepath.Dir(fset.Position(f.Pos()).Filename) + ":" + f.Name.Name
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				if decl.Tok != token.TYPE {
					continue
				}
				for _, spec := range decl.Specs {
					ts := spec.(*ast.TypeSpec)
					if ts.Name.IsExported() {
						types[pkg+"."+ts.Name.Name] = typ{ts.Pos(), ts}
					}
				}
			case *ast.FuncDecl:
				if decl.Recv == nil || !decl.Name.IsExported() {
					continue
				}
				recv := decl.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					exportedMethods[pkg+"."+id.Name] = append(exportedMethods[pkg+"."+id.Name], decl.Name.Name)
				}
			}
		}
	}
	for key, ty := range types {
		name := ty.spec.Name.Name
		pkgName := key[strings.Index(key, ":")+1:]
		at := fset.Position(ty.pos)
		switch {
		case strings.HasSuffix(name, "Option"):
			if it, ok := ty.spec.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, n := range m.Names {
						if n.IsExported() {
							t.Errorf("%s: option interface %s has the exported method %s: make it unexported", at, pkgName, n.Name)
						}
					}
				}
			} else if ms := exportedMethods[key]; len(ms) > 0 {
				t.Errorf("%s: option type %s has exported methods %v: another package could apply it", at, pkgName, ms)
			}
		case strings.HasSuffix(name, "Options"):
			if _, ok := ty.spec.Type.(*ast.StructType); ok {
				t.Errorf("%s: settings struct %s: take ...Option (DESIGN.md \"Options\")", at, pkgName)
			}
		case strings.HasSuffix(name, "Config"):
			if _, ok := ty.spec.Type.(*ast.StructType); ok && configs[pkgName] == "" {
				t.Errorf("%s: config struct %s: take ...Option, or argue it in DESIGN.md \"Options\" and list it in configs", at, pkgName)
			}
		}
	}
}
