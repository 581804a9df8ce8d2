package webhook

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// jsonLookup returns the key-worthy value at path in the JSON document body:
// a non-empty string as is, or an integer literal in canonical decimal form;
// anything else gives ok=false. Each level is decoded into json.RawMessage
// only, so the document is walked, not materialized; with duplicate members
// the last wins (as in encoding/json).
func jsonLookup(body []byte, path []string) (string, bool) {
	raw := json.RawMessage(body)
	for _, seg := range path {
		raw = bytes.TrimLeft(raw, " \t\r\n")
		if len(raw) == 0 {
			return "", false
		}
		switch raw[0] {
		case '{':
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) != nil {
				return "", false
			}
			v, ok := m[seg]
			if !ok {
				return "", false
			}
			raw = v
		case '[':
			i, ok := arrayIndex(seg)
			if !ok {
				return "", false
			}
			var a []json.RawMessage
			if json.Unmarshal(raw, &a) != nil || i >= len(a) {
				return "", false
			}
			raw = a[i]
		default:
			return "", false
		}
	}
	return jsonScalar(raw)
}

// jsonScalar converts one valid JSON value to a key: strings as is (empty:
// none), integer literals in decimal, everything else none.
func jsonScalar(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			return "", false
		}
		return s, true
	case c == '-' || ('0' <= c && c <= '9'):
		// Decode as json.Number: the literal, never through float64, so
		// integers of any size survive exactly.
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return integerLiteral(n.String())
	}
	return "", false
}

// integerLiteral returns s if it is a JSON integer literal (-?digits, no
// fraction or exponent), with "-0" as "0".
func integerLiteral(s string) (string, bool) {
	digits := s
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" {
		return "", false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", false
		}
	}
	if digits == "0" {
		return "0", true
	}
	return s, true
}

// arrayIndex parses a path segment as an array index: decimal digits without
// leading zeros, below 10^9.
func arrayIndex(seg string) (int, bool) {
	if seg == "" || len(seg) > 9 || (len(seg) > 1 && seg[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(seg)
	return i, err == nil
}
