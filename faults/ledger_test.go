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
	stored := []StoredHook{
		{ID: "h1", HookKey: a}, {ID: "h2", HookKey: b}, {ID: "h3", HookKey: b},
		{ID: "h4", HookKey: HookKey{"t", "s", ""}}, {ID: "h4", HookKey: HookKey{"t", "s", ""}},
		{ID: "h6", HookKey: a}, // stored, answered 503
	}
	r := l.Check(stored)
	if !slices.Equal(r.Missing, []string{"h5"}) || !slices.Equal(r.UnknownDuplicate, []string{"h9"}) ||
		!slices.Equal(r.StoredTwice, []string{"h4"}) || len(r.Split) != 1 || r.Split[0] != b || r.ExtraStored != 2 {
		t.Fatalf("report %+v", r)
	}
	if v := r.Violations(true); len(v) != 3 {
		t.Fatalf("violations allowing splits: %v", v)
	}
	if v := r.Violations(false); len(v) != 4 {
		t.Fatalf("violations: %v", v)
	}
	if got := l.Codes(); got[202] != 5 || got[200] != 2 || got[503] != 1 {
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
