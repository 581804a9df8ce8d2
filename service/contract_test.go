package service

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"

	"github.com/nats-io/nats.go/micro"
)

// docRow is one row of docs/PROTOCOL.md's NATS table: the subject and the
// member names its request and reply columns show.
type docRow struct {
	subject    string
	reqKeys    []string // in order of appearance, with repeats removed
	replyKeys  []string
	replyCells string
}

// protocolDoc reads the NATS table of docs/PROTOCOL.md and the member
// names of the quota.hit reply extension ("limits").
func protocolDoc(t *testing.T) (rows map[string]docRow, order []string, hitExt []string) {
	t.Helper()
	raw, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	rows = map[string]docRow{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.Contains(line, "`quota.hit` replies may carry") {
			// `"limits":[{…}]`: members of the reply object.
			if _, form, ok := strings.Cut(line, "carry `"); ok {
				form, _, _ = strings.Cut(form, "`")
				hitExt = docKeys("{" + form + "}")
			}
		}
		if !strings.HasPrefix(line, "| `sluice.v1.") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if len(cells) != 5 {
			t.Fatalf("PROTOCOL.md row with %d cells: %s", len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.ReplaceAll(strings.TrimSpace(cells[i]), "\x00", "|")
		}
		subj := strings.Trim(cells[1], "`")
		rows[subj] = docRow{subject: subj, reqKeys: docKeys(cells[2]), replyKeys: docKeys(cells[3]), replyCells: cells[3]}
		order = append(order, subj)
	}
	if len(hitExt) == 0 {
		t.Fatal("PROTOCOL.md: the quota.hit limits extension is gone")
	}
	return rows, order, hitExt
}

var quoted = regexp.MustCompile(`"[a-z_0-9]+"`)

// docKeys returns the member names of the JSON-like forms in a table
// cell: a quoted name directly inside an object ({ or , before it), not a
// value (after : or |) nor an array element.
func docKeys(cell string) []string {
	var keys []string
	var stack []byte
	prev := byte(0)
	for i := 0; i < len(cell); i++ {
		c := cell[i]
		switch c {
		case '{', '[':
			stack = append(stack, c)
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case '"':
			m := quoted.FindString(cell[i:])
			if m == "" || !strings.HasPrefix(cell[i:], m) {
				break
			}
			if len(stack) > 0 && stack[len(stack)-1] == '{' && (prev == '{' || prev == ',') {
				if k := strings.Trim(m, `"`); !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
			i += len(m) - 1
			prev = '"'
			continue
		}
		if c != ' ' {
			prev = c
		}
	}
	return keys
}

// replyKeys collects the member names of a reply, at every depth.
func replyKeys(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			into[k] = true
			replyKeys(e, into)
		}
	case []any:
		for _, e := range x {
			replyKeys(e, into)
		}
	}
}

// breakMember replaces the first member named key (at any depth) of the
// JSON object in req by a value of a type no member has ([[]]), and
// reports whether it found one.
func breakMember(v any, key string) bool {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x[key]; ok {
			x[key] = []any{[]any{}}
			return true
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range x {
				if !yield(k) {
					return
				}
			}
		}) {
			if breakMember(x[k], key) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if breakMember(e, key) {
				return true
			}
		}
	}
	return false
}

// TestProtocolContract walks docs/PROTOCOL.md's NATS table endpoint by
// endpoint against the service with real stores:
//
//   - the table's subjects are the service's endpoints;
//   - every request member the table shows is one the service reads: the
//     valid request of the row carries it, and sending it with a value of
//     the wrong type is a 400 naming it (a member the service ignored
//     would pass);
//   - the valid request succeeds, and the reply's member names are
//     exactly the table's (plus the documented extensions).
func TestProtocolContract(t *testing.T) {
	e := start(t, (*env).realQuota)
	rows, order, hitExt := protocolDoc(t)
	// The table's subjects, and (section "Roles and tenant-scoped
	// subjects") each but quota.reset again under sluice.v1.t.<tenant>.
	documented := slices.Clone(order)
	for _, s := range order {
		if s != subReset {
			documented = append(documented, scopedSubjects(s)...)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(documented)), slices.Sorted(slices.Values(allSubjects))) {
		t.Fatalf("PROTOCOL.md documents %v, the service serves %v", documented, allSubjects)
	}
	now := time.Now().UnixMilli()
	snapshot := `{"key":"tpm","label":"Tokens per minute","percent":70.5,"resets_at_ms":%d,"observed_at_ms":%d}`
	record := fmt.Sprintf(`{"account":"acct","backend":"b1","observed_at_ms":%d,"snapshots":[`+snapshot+`]}`, now, now+60000, now)
	claim := func(key, hook string) string {
		return `{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":1000000}],` +
			`"claim":{"tenant":"acme","source":"gh","key":"` + key + `","hook_id":"` + hook + `","ttl_ms":60000,"pending_ttl_ms":30000}}`
	}
	held := func(key, hook string) string {
		rev := num(t, e.ok(t, subHit, claim(key, hook)), "revision")
		return fmt.Sprintf(`{"tenant":"acme","source":"gh","key":%q,"hook_id":%q,"revision":%d}`, key, hook, rev)
	}
	for _, c := range []struct {
		subject string
		req     func() string
		// extra: reply members documented elsewhere (Extensions, or the
		// snapshot form of cooldown.record).
		extra []string
	}{
		{subHit, func() string { return claim("c-hit", "h1") }, hitExt},
		{subReset, func() string { return `{"tenant":"acme"}` }, nil},
		{subReserve, func() string { return `{"principal":"p","key":"slots","max":3,"ttl_ms":60000,"request_id":"job-1"}` }, nil},
		{subQRelease, func() string { return `{"principal":"p","key":"slots","request_id":"job-1"}` }, nil},
		{subCount, func() string { return `{"principal":"p","key":"slots"}` }, nil},
		{subSettle, func() string { return held("c-settle", "h2") }, nil},
		{subCRelease, func() string { return held("c-release", "h3") }, nil},
		{subGet, func() string { return `{"tenant":"acme","source":"gh","key":"c-hit"}` }, nil},
		{subReplay, func() string { return fmt.Sprintf(`{"namespace":"ns","key":"n1","retain_until":%d}`, now/1000+3600) }, nil},
		{subRecord, func() string { return record }, nil},
		{subPenalize, func() string { return fmt.Sprintf(`{"account":"acct","backend":"b1","until_ms":%d}`, now+3600000) }, nil},
		{subLoad, func() string { return `{"account":"acct","backends":["b1","b2"]}` }, []string{"key", "label", "percent", "resets_at_ms", "observed_at_ms"}},
	} {
		t.Run(strings.TrimPrefix(c.subject, "sluice.v1."), func(t *testing.T) {
			doc := rows[c.subject]
			valid := c.req()
			for _, k := range doc.reqKeys {
				var v any
				if err := json.Unmarshal([]byte(valid), &v); err != nil {
					t.Fatal(err)
				}
				if !breakMember(v, k) {
					t.Fatalf("the valid request %s lacks the documented member %q", valid, k)
				}
				bad, _ := json.Marshal(v)
				m := e.call(t, c.subject, string(bad))
				code, reason := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
				if code != "400" || !strings.Contains(reason, k) {
					t.Errorf("member %q of the wrong type: %s %q, want 400 naming it (the service does not read it?)", k, code, reason)
				}
			}
			got := map[string]bool{}
			replyKeys(e.ok(t, c.subject, valid), got)
			want := map[string]bool{}
			for _, k := range append(slices.Clone(doc.replyKeys), c.extra...) {
				want[k] = true
			}
			for k := range got {
				if !want[k] {
					t.Errorf("reply member %q is not in PROTOCOL.md (%s)", k, doc.replyCells)
				}
			}
			for _, k := range doc.replyKeys {
				if !got[k] {
					t.Errorf("PROTOCOL.md's reply member %q is missing from the reply", k)
				}
			}
		})
	}
}

// TestChargeKinds: a charge kind is free-form, 1..64 bytes (PROTOCOL.md
// "hit"), each kind a bucket of its own.
func TestChargeKinds(t *testing.T) {
	e := start(t, (*env).realQuota)
	hit := func(kind string) string {
		return fmt.Sprintf(`{"charges":[{"kind":%q,"tenant":"acme","increment_us":1000000,"capacity_us":1000000}]}`, kind)
	}
	for _, kind := range []string{"jobs", "hooks", "bytes", strings.Repeat("k", 64), "gpu.seconds/µs"} {
		if got := e.ok(t, subHit, hit(kind)); got["result"] != "ok" {
			t.Errorf("kind %q: %v", kind, got)
		}
	}
	// A bucket per kind: jobs is spent, another kind is not.
	if got := e.ok(t, subHit, hit("jobs")); got["result"] != "rate_limited" {
		t.Errorf("jobs again: %v", got)
	}
	if got := e.ok(t, subHit, hit("tokens")); got["result"] != "ok" {
		t.Errorf("tokens after jobs: %v", got)
	}
	for _, kind := range []string{"", strings.Repeat("k", 65)} {
		e.fails(t, subHit, hit(kind), "400", protocol.InvalidRequest.Code)
	}
}
