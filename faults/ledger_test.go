package faults

import (
	"slices"
	"testing"
)

func TestLedgerCheck(t *testing.T) {
	t.Parallel()
	l := NewLedger()
	a := HookKey{"t", "s", "a"}
	b := HookKey{"t", "s", "b"}
	c := HookKey{"t", "s", "c"}
	l.Hook(a, 202, "h1")
	l.Hook(a, 200, "h1")
	l.Hook(a, 503, "")
	l.Hook(b, 202, "h2")
	l.Hook(b, 202, "h3") // a second winner
	l.Hook(c, 200, "h9") // names a hook nobody stored
	l.Hook(HookKey{"t", "s", ""}, 202, "h4")
	l.Hook(HookKey{"t", "s", ""}, 202, "h5") // not stored
	d := HookKey{"t", "s", "d"}
	l.Hook(d, 202, "h7")                      // stored under another tenant
	l.Hook(HookKey{"u", "s", "e"}, 200, "h8") // a duplicate naming a hook stored under another key
	l.Hook(c, 204, "")                        // a 2xx other than 200 and 202
	l.Bad(c, 202, "202 with body \"ok\"")     // a malformed 2xx
	stored := []StoredHook{
		{ID: "h7", HookKey: HookKey{"u", "s", "d"}}, {ID: "h8", HookKey: HookKey{"u", "s", "f"}},
		{ID: "h1", HookKey: a}, {ID: "h2", HookKey: b}, {ID: "h3", HookKey: b},
		{ID: "h4", HookKey: HookKey{"t", "s", ""}}, {ID: "h4", HookKey: HookKey{"t", "s", ""}},
		{ID: "h6", HookKey: a}, // stored, answered 503
	}
	r := l.Check(stored)
	if !slices.Equal(r.Missing, []string{"h5"}) || !slices.Equal(r.UnknownDuplicate, []string{"h9"}) ||
		!slices.Equal(r.StoredTwice, []string{"h4"}) || len(r.Split) != 1 || r.Split[0] != b || r.ExtraStored != 2 ||
		!slices.Equal(r.Mismatched, []string{"h7 stored as u/s/d", "h8 stored as u/s/f"}) ||
		!slices.Equal(r.Bad, []string{"t/s/c: unexpected status 204", `t/s/c: 202 with body "ok"`}) {
		t.Fatalf("report %+v", r)
	}
	if v := r.Violations(true); len(v) != 5 {
		t.Fatalf("violations allowing splits: %v", v)
	}
	if v := r.Violations(false); len(v) != 6 {
		t.Fatalf("violations: %v", v)
	}
	if got := l.Codes(); got[202] != 7 || got[200] != 3 || got[204] != 1 || got[503] != 1 {
		t.Fatalf("codes %v", got)
	}
}

func TestCounter(t *testing.T) {
	t.Parallel()
	c := &Counter{Max: 2}
	c.Granted(1)
	c.Granted(2)
	if v := c.Violations(); len(v) != 0 {
		t.Fatal(v)
	}
	c.Granted(2) // a third holder: over the max
	c.Releasing()
	c.Granted(3) // a count over the max
	if v := c.Violations(); len(v) != 2 {
		t.Fatalf("violations %v", v)
	}
	if s := c.Stats(); s.MaxHeld != 3 || s.Grants != 4 {
		t.Fatalf("stats %+v", s)
	}
}
