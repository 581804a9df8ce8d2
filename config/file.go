package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fileConfig is the YAML file beyond the flag keys. Every field is a pointer
// or a map so that "not set" differs from a zero value.
type fileConfig struct {
	AllowUnknown *bool                    `yaml:"allow_unknown"`
	NATSUsers    map[string]*fileNATSUser `yaml:"nats_users"`
	Defaults     *fileDefaults            `yaml:"defaults"`
	Tenants      map[string]*fileTenant   `yaml:"tenants"`
}

type fileNATSUser struct {
	Role        *string  `yaml:"role"`
	Tenants     []string `yaml:"tenants"`
	Password    *string  `yaml:"password"`
	PasswordEnv *string  `yaml:"password_env"`
	NKey        *string  `yaml:"nkey"`
}

type fileDefaults struct {
	Limits *fileLimits         `yaml:"limits"`
	Source *fileSourceDefaults `yaml:"source"`
}

type fileLimits struct {
	Hooks *fileRate `yaml:"hooks"`
	Bytes *fileRate `yaml:"bytes"`
}

type fileRate struct {
	Rate  *float64 `yaml:"rate"`
	Burst *int64   `yaml:"burst"`
}

type fileSourceDefaults struct {
	Dedupe       *string `yaml:"dedupe"`
	MaxBodyBytes *int64  `yaml:"max_body_bytes"`
}

type fileTenant struct {
	AllowUnknown *bool                  `yaml:"allow_unknown"`
	Limits       *fileLimits            `yaml:"limits"`
	Sources      map[string]*fileSource `yaml:"sources"`
}

// fileVerify is a source's verify: a preset's name ("github") or a
// scheme's fields (webhook.SchemeFromFields; fallback as a mapping).
type fileVerify struct {
	Fields map[string]string
}

var fileVerifyType = reflect.TypeOf(fileVerify{})

type fileSource struct {
	Dedupe       *string     `yaml:"dedupe"`
	Verify       *fileVerify `yaml:"verify"`
	Secret       *string     `yaml:"secret"`
	SecretEnv    *string     `yaml:"secret_env"`
	MaxBodyBytes *int64      `yaml:"max_body_bytes"`
	Limits       *fileLimits `yaml:"limits"`
	EventType    *string     `yaml:"event_type"`
	Methods      []string    `yaml:"methods"`
	Handshake    *string     `yaml:"handshake"`
	ContentTypes []string    `yaml:"content_types"`
	IPAllow      []string    `yaml:"ip_allow"`
}

// maxFileNodes bounds the nodes visited while decoding (aliases included),
// so that alias bombs fail instead of expanding.
const maxFileNodes = 100000

// parseFile parses the YAML file: the structured part, and the flag keys
// (by flag name) with their raw string values. An unknown or duplicate field
// is an error naming its full path; so is a value of the wrong type.
func parseFile(data []byte) (*fileConfig, map[string]string, error) {
	doc, err := decodeYAML(data)
	if err != nil {
		return nil, nil, err
	}
	fc, vals := &fileConfig{}, map[string]string{}
	if doc == nil { // empty file
		return fc, vals, nil
	}
	w := walker{budget: maxFileNodes}
	root, err := w.deref(doc)
	if err != nil {
		return nil, nil, err
	}
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return fc, vals, nil
		}
		if root, err = w.deref(root.Content[0]); err != nil {
			return nil, nil, err
		}
	}
	if isNull(root) {
		return fc, vals, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: the file must be a mapping", root.Line)
	}
	flagKeys := map[string]string{}
	for _, s := range settings {
		if s.name != "config" {
			flagKeys[FileKey(s.name)] = s.name
		}
	}
	seen := map[string]bool{}
	rv := reflect.ValueOf(fc).Elem()
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key, err := w.key(k, "")
		if err != nil {
			return nil, nil, err
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("line %d: duplicate field %s", k.Line, key)
		}
		seen[key] = true
		if name, ok := flagKeys[key]; ok {
			s, set, err := w.flagValue(v, key, name == "routes")
			if err != nil {
				return nil, nil, err
			}
			if set {
				vals[name] = s
			}
			continue
		}
		f, ok := fieldByTag(rv, key)
		if !ok {
			return nil, nil, fmt.Errorf("line %d: unknown field %s", k.Line, key)
		}
		if err := w.decode(v, f, key); err != nil {
			return nil, nil, err
		}
	}
	return fc, vals, nil
}

// decodeYAML parses data into a node tree (nil for an empty file). It
// accepts exactly one YAML document.
func decodeYAML(data []byte) (doc *yaml.Node, err error) {
	// yaml.v3 has panicked on hostile input before (CVE-2022-28948); a
	// configuration error is the right answer, not a crash. Only the parser
	// is guarded: a panic in this package's own code stays a panic.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("invalid YAML: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: more than one YAML document", extra.Line)
	}
	return &n, nil
}

// walker decodes yaml.Nodes into the file types, naming every error by its
// path (tenants.acme.sources.gh.secrte), with a budget of nodes. Scalars are
// yaml.Node.Decode's; the walker says what the decoder cannot: the path of
// an unknown or duplicate field, an integer given a fraction (the decoder
// truncates), a boolean written yes or on (YAML 1.1's words), and a bound on
// nodes with aliases expanded.
type walker struct {
	budget int
}

// deref follows aliases and charges the budget.
func (w *walker) deref(n *yaml.Node) (*yaml.Node, error) {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil, fmt.Errorf("line %d: alias chain too long", n.Line)
		}
		n = n.Alias
	}
	if n == nil {
		return nil, errors.New("invalid YAML: empty node")
	}
	w.budget--
	if w.budget < 0 {
		return nil, fmt.Errorf("line %d: document too large (more than %d nodes, aliases expanded)", n.Line, maxFileNodes)
	}
	return n, nil
}

// key returns a mapping key, which must be a scalar.
func (w *walker) key(k *yaml.Node, path string) (string, error) {
	k, err := w.deref(k)
	if err != nil {
		return "", err
	}
	if k.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("line %d: %s: keys must be scalars", k.Line, orRoot(path))
	}
	return k.Value, nil
}

// flagValue returns a flag key's raw value: a scalar (null = not set), or for
// routes also a sequence of scalars, joined with ','.
func (w *walker) flagValue(n *yaml.Node, key string, list bool) (string, bool, error) {
	n, err := w.deref(n)
	if err != nil {
		return "", false, err
	}
	switch {
	case isNull(n):
		return "", false, nil
	case n.Kind == yaml.ScalarNode:
		return n.Value, true, nil
	case n.Kind == yaml.SequenceNode && list:
		parts := make([]string, 0, len(n.Content))
		for _, e := range n.Content {
			e, err := w.deref(e)
			if err != nil {
				return "", false, err
			}
			if e.Kind != yaml.ScalarNode || isNull(e) {
				return "", false, fmt.Errorf("line %d: %s: want a list of strings", e.Line, key)
			}
			parts = append(parts, e.Value)
		}
		return strings.Join(parts, ","), true, nil
	}
	return "", false, fmt.Errorf("line %d: %s: want a scalar value", n.Line, key)
}

// decode decodes n into v (a settable value of one of the file types) at
// path.
func (w *walker) decode(n *yaml.Node, v reflect.Value, path string) error {
	n, err := w.deref(n)
	if err != nil {
		return err
	}
	if isNull(n) {
		return nil // not set
	}
	if v.Type() == fileVerifyType {
		return w.decodeVerify(n, v, path)
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := w.decode(n, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: %s: want a mapping", n.Line, path)
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, err := w.key(n.Content[i], path)
			if err != nil {
				return err
			}
			p := path + "." + key
			if seen[key] {
				return fmt.Errorf("line %d: duplicate field %s", n.Content[i].Line, p)
			}
			seen[key] = true
			f, ok := fieldByTag(v, key)
			if !ok {
				return fmt.Errorf("line %d: unknown field %s", n.Content[i].Line, p)
			}
			if err := w.decode(n.Content[i+1], f, p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: %s: want a mapping", n.Line, path)
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, err := w.key(n.Content[i], path)
			if err != nil {
				return err
			}
			p := path + "." + key
			if v.MapIndex(reflect.ValueOf(key)).IsValid() {
				return fmt.Errorf("line %d: duplicate field %s", n.Content[i].Line, p)
			}
			e := reflect.New(v.Type().Elem()).Elem()
			if err := w.decode(n.Content[i+1], e, p); err != nil {
				return err
			}
			v.SetMapIndex(reflect.ValueOf(key), e)
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: %s: want a list", n.Line, path)
		}
		out := reflect.MakeSlice(v.Type(), 0, len(n.Content))
		for i, e := range n.Content {
			ev := reflect.New(v.Type().Elem()).Elem()
			if err := w.decode(e, ev, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
			out = reflect.Append(out, ev)
		}
		v.Set(out)
		return nil
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: %s: want a string", n.Line, path)
		}
		v.SetString(n.Value)
		return nil
	default: // bool, int64, float64
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: %s: want %s", n.Line, path, kindName(v.Kind()))
		}
		// The decoder refuses what is not a boolean or a number, but it
		// would truncate 1.5 into an integer field and take YAML 1.1's
		// yes/no/on/off for a boolean: those two checks are ours.
		tag := n.ShortTag()
		lax := v.Kind() == reflect.Int64 && tag != "!!int" || v.Kind() == reflect.Bool && tag != "!!bool"
		if lax || n.Decode(v.Addr().Interface()) != nil {
			return fmt.Errorf("line %d: %s: want %s, got %.40q", n.Line, path, kindName(v.Kind()), n.Value)
		}
		return nil
	}
}

// decodeVerify decodes a source's verify: a scalar names a preset; a
// mapping gives the scheme's fields (scalars; fallback a mapping of
// scalars, flattened to fallback.<field>).
func (w *walker) decodeVerify(n *yaml.Node, v reflect.Value, path string) error {
	fields := map[string]string{}
	if n.Kind == yaml.ScalarNode {
		fields["name"] = n.Value
		v.Set(reflect.ValueOf(fileVerify{Fields: fields}))
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s: want a preset name or a mapping", n.Line, path)
	}
	var add func(n *yaml.Node, prefix string, nested bool) error
	add = func(n *yaml.Node, prefix string, nested bool) error {
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, err := w.key(n.Content[i], path)
			if err != nil {
				return err
			}
			e, err := w.deref(n.Content[i+1])
			if err != nil {
				return err
			}
			p := path + "." + prefix + key
			if _, dup := fields[prefix+key]; dup {
				return fmt.Errorf("line %d: duplicate field %s", n.Content[i].Line, p)
			}
			switch {
			case key == "fallback" && !nested && e.Kind == yaml.MappingNode:
				if err := add(e, "fallback.", true); err != nil {
					return err
				}
			case e.Kind == yaml.ScalarNode && !isNull(e):
				fields[prefix+key] = e.Value
			default:
				return fmt.Errorf("line %d: %s: want a string", e.Line, p)
			}
		}
		return nil
	}
	if err := add(n, "", false); err != nil {
		return err
	}
	v.Set(reflect.ValueOf(fileVerify{Fields: fields}))
	return nil
}

// fieldByTag returns the field of struct v whose yaml tag is key.
func fieldByTag(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// isNull reports whether n is a YAML null (~, null, or nothing).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	}
	return "a " + k.String()
}

func orRoot(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}
