package option

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

type target struct {
	now func() time.Time
	log *slog.Logger
}

func clockOf(t *target) *func() time.Time { return &t.now }

// TestClock: a clock is set; a nil clock is an error wrapping the
// package's sentinel and leaves the field alone.
func TestClock(t *testing.T) {
	errInvalid := errors.New("pkg: invalid option")
	at := time.Unix(42, 0)
	var tg target
	if err := Clock(func() time.Time { return at }, errInvalid, clockOf)(&tg); err != nil {
		t.Fatal(err)
	}
	if tg.now == nil || !tg.now().Equal(at) {
		t.Fatal("clock not set")
	}
	tg = target{}
	err := Clock(nil, errInvalid, clockOf)(&tg)
	if !errors.Is(err, errInvalid) || err.Error() != "pkg: invalid option: nil clock" {
		t.Fatalf("nil clock: %v", err)
	}
	if tg.now != nil {
		t.Fatal("nil clock set")
	}
}

// TestLogger: a logger is set; nil keeps the one there.
func TestLogger(t *testing.T) {
	logOf := func(t *target) **slog.Logger { return &t.log }
	def, l := slog.New(slog.DiscardHandler), slog.Default()
	tg := target{log: def}
	if err := Logger(nil, logOf)(&tg); err != nil || tg.log != def {
		t.Fatalf("nil logger: %v, replaced %v", err, tg.log != def)
	}
	if err := Logger(l, logOf)(&tg); err != nil || tg.log != l {
		t.Fatalf("logger: %v, set %v", err, tg.log == l)
	}
}

var errTest = errors.New("pkg: invalid option")

type conf struct {
	d  time.Duration
	n  int
	fn func()
}

func TestPositive(t *testing.T) {
	set := func(c *conf, d time.Duration) { c.d = d }
	for _, d := range []time.Duration{0, -time.Second} {
		var c conf
		if err := Positive(errTest, "timeout", d, set)(&c); !errors.Is(err, errTest) || err.Error() != "pkg: invalid option: timeout must be > 0, got "+d.String() || c.d != 0 {
			t.Errorf("%v: %v, set %v", d, err, c.d)
		}
	}
	var c conf
	if err := Positive(errTest, "timeout", time.Second, set)(&c); err != nil || c.d != time.Second {
		t.Errorf("1s: %v, set %v", err, c.d)
	}
	if err := Positive(errTest, "count", 0, func(c *conf, n int) { c.n = n })(&c); err == nil || err.Error() != "pkg: invalid option: count must be > 0, got 0" {
		t.Errorf("count 0: %v", err)
	}
}

func TestRequired(t *testing.T) {
	var c conf
	f := func() {}
	if err := Required(errTest, false, "nil func", func(c *conf) { c.fn = f })(&c); !errors.Is(err, errTest) || err.Error() != "pkg: invalid option: nil func" || c.fn != nil {
		t.Errorf("missing: %v", err)
	}
	if err := Required(errTest, true, "nil func", func(c *conf) { c.fn = f })(&c); err != nil || c.fn == nil {
		t.Errorf("given: %v", err)
	}
}

type testOption interface{ apply(*conf) error }

type testFunc func(*conf) error

func (f testFunc) apply(c *conf) error { return f(c) }

// TestApply: options apply in order, a nil one is skipped, the first
// error stops the rest.
func TestApply(t *testing.T) {
	set := func(n int) testOption { return testFunc(func(c *conf) error { c.n = c.n*10 + n; return nil }) }
	var c conf
	if err := Apply(&c, []testOption{set(1), nil, set(2)}, testOption.apply); err != nil || c.n != 12 {
		t.Fatalf("Apply = %v, n %d; want nil, 12", err, c.n)
	}
	c = conf{}
	fail := testFunc(func(*conf) error { return errTest })
	if err := Apply(&c, []testOption{set(1), fail, set(2)}, testOption.apply); !errors.Is(err, errTest) || c.n != 1 {
		t.Fatalf("Apply with a failing option = %v, n %d; want errTest, 1", err, c.n)
	}
}
