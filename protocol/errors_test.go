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

// TestProtocolDocListsTheErrors: docs/PROTOCOL.md's "Errors" section holds
// the table protocol.Errors makes, row for row; a code added, changed or
// dropped in one and not the other fails here, printing the table to
// paste.
func TestProtocolDocListsTheErrors(t *testing.T) {
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
	want := errorTable()
	if !strings.Contains(doc[i:], "\n"+want) {
		t.Fatalf("docs/PROTOCOL.md's Errors table is not protocol.Errors; it should read:\n%s", want)
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
