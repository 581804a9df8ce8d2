package protocol_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

// errorTable renders protocol.Errors as docs/PROTOCOL.md's error table.
func errorTable() string {
	var b strings.Builder
	b.WriteString("| code | HTTP | NATS | meaning |\n|---|---|---|---|\n")
	status := func(n int) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprint(n)
	}
	for _, e := range protocol.Errors {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", e.Code, status(e.HTTP), status(e.NATS), e.Meaning)
	}
	return b.String()
}

// docErrorRows returns the rows of docs/PROTOCOL.md's "Errors" table,
// from its heading to the next: each row's cells, backquotes trimmed.
func docErrorRows(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	const heading = "\n## Errors\n"
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("docs/PROTOCOL.md has no %q section; it should hold:\n%s", strings.TrimSpace(heading), errorTable())
	}
	section := doc[i+len(heading):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	var rows [][]string
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| code |") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.Trim(strings.TrimSpace(cells[k]), "`")
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestProtocolDocListsTheErrors: docs/PROTOCOL.md's "Errors" table is
// protocol.Errors, row for row: a code in one and not the other (missing
// or extra), a status or meaning that differs, or another order fails
// here, printing the table to paste.
func TestProtocolDocListsTheErrors(t *testing.T) {
	rows := docErrorRows(t)
	inDoc := map[string][]string{}
	var order []string
	for _, r := range rows {
		if len(r) != 4 {
			t.Errorf("docs/PROTOCOL.md Errors: a row of %d cells, want 4: %q", len(r), r)
			continue
		}
		if _, dup := inDoc[r[0]]; dup {
			t.Errorf("docs/PROTOCOL.md Errors: %s listed twice", r[0])
		}
		inDoc[r[0]] = r
		order = append(order, r[0])
	}
	status := func(n int) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprint(n)
	}
	var want []string
	for _, e := range protocol.Errors {
		want = append(want, e.Code)
		r, ok := inDoc[e.Code]
		switch {
		case !ok:
			t.Errorf("docs/PROTOCOL.md Errors: %s is missing", e.Code)
		case r[1] != status(e.HTTP) || r[2] != status(e.NATS) || r[3] != e.Meaning:
			t.Errorf("docs/PROTOCOL.md Errors: %s reads %q, protocol.Errors %q", e.Code, r[1:], []string{status(e.HTTP), status(e.NATS), e.Meaning})
		}
		delete(inDoc, e.Code)
	}
	for code := range inDoc {
		t.Errorf("docs/PROTOCOL.md Errors: %s is not in protocol.Errors", code)
	}
	if !t.Failed() && strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("docs/PROTOCOL.md Errors: order %v, protocol.Errors %v", order, want)
	}
	if t.Failed() {
		t.Logf("the table, as protocol.Errors makes it:\n%s", errorTable())
	}
}

// Every code is one word of lower case and underscores, answered on at
// least one side, and listed once.
func TestErrorsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range protocol.Errors {
		if seen[e.Code] {
			t.Errorf("%s listed twice", e.Code)
		}
		seen[e.Code] = true
		if strings.Trim(e.Code, "abcdefghijklmnopqrstuvwxyz_") != "" || e.Code == "" {
			t.Errorf("code %q", e.Code)
		}
		if e.HTTP == 0 && e.NATS == 0 || e.Meaning == "" {
			t.Errorf("%s: answered nowhere or without a meaning: %+v", e.Code, e)
		}
	}
}
