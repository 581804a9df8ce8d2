// Package procstat reads what the bench measures of processes from /proc:
// a process's CPU time and the load average.
package procstat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPUTime is a process's user+system CPU time: /proc/<pid>/stat fields 14
// (utime) and 15 (stime), summed over all its threads by the kernel.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ticks, err := parseStatTicks(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ticksToDuration(ticks, clockTicks()), nil
}

// parseStatTicks returns utime+stime in clock ticks from the contents of a
// /proc/<pid>/stat file. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted after the
// last ')'.
func parseStatTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want > %d", len(f), stime)
	}
	u, err := strconv.ParseUint(f[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseUint(f[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return u + s, nil
}

func ticksToDuration(ticks, hz uint64) time.Duration {
	if hz == 0 {
		hz = 100
	}
	return time.Duration(ticks * uint64(time.Second) / hz)
}

var clockTicks = sync.OnceValue(func() uint64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	return auxvClockTicks(b)
})

// auxvClockTicks finds AT_CLKTCK (17) in a 64-bit little-endian auxiliary
// vector; 100 (USER_HZ on every Linux architecture Go supports) if absent.
func auxvClockTicks(b []byte) uint64 {
	const atClkTck = 17
	for len(b) >= 16 {
		k, v := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		if k == 0 {
			break
		}
		if k == atClkTck && v > 0 {
			return v
		}
		b = b[16:]
	}
	return 100
}

// LoadAvg is the first field of /proc/loadavg ("" when unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
