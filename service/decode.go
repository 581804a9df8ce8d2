package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// errInvalid marks a malformed or invalid request: the caller's fault,
// answered with a 400.
var errInvalid = errors.New("invalid_request")

// invalid returns an error wrapping errInvalid with a formatted reason.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// Request bounds, checked before anything is decoded or allocated. The
// largest valid request (a hit with 16 charges and a claim) is a few KiB.
const (
	// MaxRequestBytes bounds a request body.
	MaxRequestBytes = 64 << 10
	// maxArrayItems bounds every JSON array of a request (the longest valid
	// ones: 100 cooldown backends).
	maxArrayItems = 128
)

// decodeStrict decodes the JSON object data into the struct v points to,
// more strictly than encoding/json: exactly one object; member names match
// the json tags exactly (not case-folded); a wrong type or a number that
// does not fit is an error naming its path ("charges[1].increment_us: want
// integer, got string"). Unknown members are ignored ("extend, don't
// change") and null is the same as absent. A body over MaxRequestBytes or an
// array over maxArrayItems is refused before decoding. Errors wrap errInvalid.
func decodeStrict(data []byte, v any) error {
	if len(data) > MaxRequestBytes {
		return invalid("request larger than %d bytes", MaxRequestBytes)
	}
	if !json.Valid(data) {
		var probe any
		err := json.Unmarshal(data, &probe)
		if err == nil { // cannot happen: json.Valid said no
			err = errors.New("not JSON")
		}
		return invalid("malformed JSON: %s", err.Error())
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		panic("service: decodeStrict needs a pointer to a struct")
	}
	raw := bytes.TrimSpace(data)
	if len(raw) == 0 || raw[0] != '{' {
		return invalid("request must be a JSON object, got %s", jsonKind(raw))
	}
	return decodeInto(raw, rv.Elem(), "")
}

// hasMember reports whether the JSON object data (decodeStrict took it)
// has the member name, not null: for a member whose zero value is valid
// and whose absence is not.
func hasMember(data []byte, name string) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil {
		return false
	}
	v, ok := members[name]
	return ok && string(bytes.TrimSpace(v)) != "null"
}

// decodeInto decodes raw (valid JSON) into rv, which is settable.
func decodeInto(raw json.RawMessage, rv reflect.Value, path string) error {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		rv.SetZero()
		return nil
	}
	switch rv.Kind() {
	case reflect.Pointer:
		p := reflect.New(rv.Type().Elem())
		if err := decodeInto(raw, p.Elem(), path); err != nil {
			return err
		}
		rv.Set(p)
		return nil
	case reflect.Struct:
		if raw[0] != '{' {
			return typeError(path, "object", raw)
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil {
			return typeError(path, "object", raw)
		}
		t := rv.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, ok := jsonName(f)
			if !ok {
				continue
			}
			m, present := members[name]
			if !present {
				continue
			}
			if err := decodeInto(m, rv.Field(i), joinPath(path, name)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			break // []byte: base64 string, as encoding/json
		}
		if raw[0] != '[' {
			return typeError(path, "array", raw)
		}
		items, err := arrayItems(raw, maxArrayItems)
		if err != nil {
			return invalid("%s: %s", orTop(path), err.Error())
		}
		s := reflect.MakeSlice(rv.Type(), len(items), len(items))
		for i, item := range items {
			if err := decodeInto(item, s.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		rv.Set(s)
		return nil
	}
	if err := json.Unmarshal(raw, rv.Addr().Interface()); err != nil {
		return typeError(path, wantKind(rv.Type()), raw)
	}
	return nil
}

// arrayItems splits raw (a valid JSON array) into at most max items; more is
// an error found after reading max+1 items, so memory stays bounded by max.
func arrayItems(raw json.RawMessage, max int) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '['
		return nil, err
	}
	var items []json.RawMessage
	for dec.More() {
		if len(items) == max {
			return nil, fmt.Errorf("more than %d items", max)
		}
		var item json.RawMessage
		if err := dec.Decode(&item); err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return items, nil
}

func orTop(path string) string {
	if path == "" {
		return "request"
	}
	return path
}

// jsonName is the member name of a struct field: its json tag's name, or
// the field name; ok is false for a field tagged "-".
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, true
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func typeError(path, want string, raw json.RawMessage) error {
	got := jsonKind(raw)
	if got == "number" && (want == "integer" || want == "non-negative integer") {
		return invalid("%s: want %s, got a non-integer or out-of-range number", path, want)
	}
	return invalid("%s: want %s, got %s", path, want, got)
}

// wantKind names the JSON type a Go type decodes from.
func wantKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return t.String()
}

// jsonKind names the JSON type of raw (valid JSON, or empty).
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
