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
