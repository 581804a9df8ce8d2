package config

import (
	"errors"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// VerifyFields reads a source's verification written as YAML — what
// follows `verify:` in the file: a preset's name, or a mapping of the
// scheme's fields (fallback a mapping) — into the fields SchemeOf reads,
// by the file's own reading of verify. An error names the line.
func VerifyFields(data []byte) (map[string]string, error) {
	doc, err := decodeYAML(data)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, errors.New("empty: want a preset name or a mapping of the scheme's fields")
	}
	w := walker{budget: maxFileNodes}
	root, err := w.deref(doc)
	if err == nil && root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root, err = w.deref(root.Content[0])
	}
	if err != nil {
		return nil, err
	}
	if isNull(root) || root.Kind == yaml.DocumentNode {
		return nil, errors.New("empty: want a preset name or a mapping of the scheme's fields")
	}
	var fv fileVerify
	if err := w.decodeVerify(root, reflect.ValueOf(&fv).Elem(), "verify"); err != nil {
		return nil, err
	}
	return fv.Fields, nil
}
