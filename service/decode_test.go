package service

import (
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

type decInner struct {
	N int64  `json:"n"`
	S string `json:"s"`
}

type decOuter struct {
	A     string     `json:"a"`
	B     *int64     `json:"b"`
	U     uint64     `json:"u"`
	F     float64    `json:"f"`
	OK    bool       `json:"ok"`
	In    *decInner  `json:"in"`
	List  []decInner `json:"list"`
	Strs  []string   `json:"strs,omitempty"`
	Skip  string     `json:"-"`
	NoTag string
}

func i64(v int64) *int64 { return &v }

func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want decOuter
		err  string // "" = success; else a substring of the error
	}{
		{name: "all fields", in: `{"a":"x","b":0,"u":18446744073709551615,"f":1.5,"ok":true,"in":{"n":-3,"s":"y"},"list":[{"n":1},{"s":"z"}],"strs":["p","q"],"NoTag":"t"}`,
			want: decOuter{A: "x", B: i64(0), U: 1<<64 - 1, F: 1.5, OK: true, In: &decInner{N: -3, S: "y"}, List: []decInner{{N: 1}, {S: "z"}}, Strs: []string{"p", "q"}, NoTag: "t"}},
		{name: "empty object", in: ` { } `, want: decOuter{}},
		{name: "unknown members ignored", in: `{"a":"x","zz":{"deep":[1,2,{}]},"in":{"extra":true}}`, want: decOuter{A: "x", In: &decInner{}}},
		{name: "names are case-sensitive", in: `{"A":5,"B":"x","OK":"no","notag":1}`, want: decOuter{}},
		{name: "null is absent", in: `{"a":null,"b":null,"in":null,"list":null,"u":null}`, want: decOuter{}},
		{name: "dash tag never set", in: `{"-":"x","Skip":"y"}`, want: decOuter{}},
		{name: "last duplicate wins", in: `{"a":"1","a":"2"}`, want: decOuter{A: "2"}},
		{name: "float for int", in: `{"b":1.5}`, err: "b: want integer, got a non-integer or out-of-range number"},
		{name: "exponent for int", in: `{"b":1e3}`, err: "b: want integer"},
		{name: "int overflow", in: `{"b":9223372036854775808}`, err: "b: want integer"},
		{name: "negative for uint", in: `{"u":-1}`, err: "u: want non-negative integer"},
		{name: "string for int", in: `{"b":"1"}`, err: "b: want integer, got string"},
		{name: "number for string", in: `{"a":1}`, err: "a: want string, got number"},
		{name: "string for bool", in: `{"ok":"true"}`, err: "ok: want boolean, got string"},
		{name: "array for object", in: `{"in":[]}`, err: "in: want object, got array"},
		{name: "object for array", in: `{"list":{}}`, err: "list: want array, got object"},
		{name: "nested path", in: `{"list":[{"n":1},{"n":"2"}]}`, err: "list[1].n: want integer, got string"},
		{name: "nested object path", in: `{"in":{"s":false}}`, err: "in.s: want string, got boolean"},
		{name: "not an object", in: `[1]`, err: "request must be a JSON object, got array"},
		{name: "null body", in: `null`, err: "request must be a JSON object, got null"},
		{name: "empty body", in: ``, err: "malformed JSON"},
		{name: "two values", in: `{}{}`, err: "malformed JSON"},
		{name: "syntax", in: `{"a":}`, err: "malformed JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got decOuter
			err := decodeStrict([]byte(tc.in), &got)
			if tc.err != "" {
				if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q wrapping errInvalid, got %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDecodeStrictMatchesEncodingJSON: on input that uses the exact member
// names, decodeStrict gives what encoding/json gives.
func TestDecodeStrictMatchesEncodingJSON(t *testing.T) {
	in := decOuter{A: "a\u00e9\"", B: i64(-7), U: 42, F: -0.25, OK: true, In: &decInner{N: 9}, List: []decInner{{S: "s"}, {}}, Strs: []string{""}, NoTag: "n"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var strict, std decOuter
	if err := decodeStrict(data, &strict); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &std); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(strict, std) || !reflect.DeepEqual(strict, in) {
		t.Fatalf("strict %+v\nstd    %+v\nin     %+v", strict, std, in)
	}
}

func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"x","b":1,"list":[{"n":1}]}`, `{"in":{"n":"x"}}`, `[`, `null`, `{"u":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v decOuter
		if err := decodeStrict(data, &v); err != nil && !errors.Is(err, errInvalid) {
			t.Fatalf("error does not wrap errInvalid: %v", err)
		}
	})
}

func TestDetail(t *testing.T) {
	for _, tc := range []struct {
		msg, want string
		s         error
	}{
		{"invalid_request: max must be >= 1", "max must be >= 1", errInvalid},
		{"claim: claims: invalid argument: key must not be empty", "claim: key must not be empty", nil},
		{"invalid_request: a\nb\rc", "a b c", errInvalid},
		{"invalid_request: " + strings.Repeat("é", 300), strings.Repeat("é", 200) + "…", errInvalid},
	} {
		s := tc.s
		if s == nil {
			s = errors.New("claims: invalid argument")
		}
		if got := detail(tc.msg, s); got != tc.want {
			t.Errorf("detail(%q) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeBounded: an oversized request and an overlong array are refused
// before anything proportional to them is allocated. (An 8 MiB request of
// [{},{},…] used to allocate hundreds of MB.)
func TestDecodeBounded(t *testing.T) {
	huge := []byte(`{"list":[` + strings.Repeat(`{},`, (8<<20)/3) + `{}]}`)
	var err error
	n := allocated(func() { err = decodeStrict(huge, &decOuter{}) })
	if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "request larger than 65536 bytes") {
		t.Fatalf("8 MiB request: %v", err)
	}
	if n > 4<<10 {
		t.Fatalf("8 MiB request allocated %d bytes before refusal", n)
	}
	// Under the size limit, an array of 20,000 items: refused after
	// maxArrayItems of them.
	long := []byte(`{"list":[` + strings.Repeat(`{},`, 20000) + `{}]}`)
	n = allocated(func() { err = decodeStrict(long, &decOuter{}) })
	if err == nil || !strings.Contains(err.Error(), "list: more than 128 items") {
		t.Fatalf("20,000 items: %v", err)
	}
	// Measured ~73 KiB (the decoder buffers the 60 KiB array, plus 64 raw
	// items); 20,000 decoded items would be over 1 MiB.
	if n > 96<<10 {
		t.Fatalf("20,000 items allocated %d bytes", n)
	}
	// 64 items still decode.
	ok := []byte(`{"list":[` + strings.Repeat(`{"n":1},`, 63) + `{"n":1}]}`)
	var v decOuter
	if err := decodeStrict(ok, &v); err != nil || len(v.List) != 64 {
		t.Fatalf("64 items: %d, %v", len(v.List), err)
	}
}
