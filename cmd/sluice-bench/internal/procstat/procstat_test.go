package procstat

import (
	"encoding/binary"
	"os"
	"testing"
	"time"
)

func TestParseStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		err        bool
	}{
		{"plain", "1234 (edge) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 12 0 100 0 0", 325, false},
		{"name with spaces and parens", "77 (we ird) (x)) R 1 77 77 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 5 0 0", 10, false},
		{"truncated", "1 (x) S 1 2 3", 0, true},
		{"no name", "garbage", 0, true},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a 3 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatTicks([]byte(tc.stat))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("parseStatTicks = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestCPUTimeOfSelf(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		now, err := CPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time did not grow in 5 s of spinning (%v)", now)
		}
	}
	_ = x
}

func TestAuxvClockTicks(t *testing.T) {
	vec := func(pairs ...uint64) []byte {
		b := make([]byte, 8*len(pairs))
		for i, p := range pairs {
			binary.LittleEndian.PutUint64(b[8*i:], p)
		}
		return b
	}
	if got := auxvClockTicks(vec(6, 4096, 17, 250, 0, 0)); got != 250 {
		t.Errorf("AT_CLKTCK 250: got %d", got)
	}
	if got := auxvClockTicks(vec(6, 4096, 0, 0, 17, 250)); got != 100 {
		t.Errorf("after AT_NULL: got %d, want the default 100", got)
	}
	if got := ticksToDuration(250, 100); got != 2500*time.Millisecond {
		t.Errorf("250 ticks at 100 Hz = %v", got)
	}
}

func TestParseHostCPU(t *testing.T) {
	const stat = "cpu  977120 14485 283138 697057 193012 0 14895 33382 5 7\n" +
		"cpu0 488248 7323 139262 379148 70683 0 5567 16226 0 0\n" +
		"intr 1 2 3\n"
	h, err := parseHostCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	// guest (5) and guest_nice (7) are inside user and nice: not added.
	const total = 977120 + 14485 + 283138 + 697057 + 193012 + 0 + 14895 + 33382
	if h.Total != total || h.Idle != 697057+193012 {
		t.Fatalf("parseHostCPU = %+v, want total %d idle %d", h, total, 697057+193012)
	}
	// An old kernel's four fields only.
	h0, err := parseHostCPU([]byte("cpu 10 0 10 80\n"))
	if err != nil || h0.Total != 100 || h0.Idle != 80 {
		t.Fatalf("four fields: %+v, %v", h0, err)
	}
	later := HostCPU{Idle: h0.Idle + 15, Total: h0.Total + 100}
	if got := later.IdleShare(h0); got != 0.15 {
		t.Errorf("IdleShare = %v, want 0.15", got)
	}
	if got := h0.IdleShare(h0); got != -1 {
		t.Errorf("IdleShare over no time = %v, want -1", got)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4\n", "cpu 1 2\n", "cpu 1 x 3 4\n"} {
		if _, err := parseHostCPU([]byte(bad)); err == nil {
			t.Errorf("parseHostCPU(%q): want an error", bad)
		}
	}
}
