package option

import (
	"errors"
	"testing"
	"time"
)

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
