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

// HostCPU is the machine's CPU time from the first line of /proc/stat, in
// clock ticks summed over all CPUs.
type HostCPU struct {
	// Idle is idle + iowait (a CPU waiting for I/O could run something);
	// Total is every field that counts time (user, nice, system, idle,
	// iowait, irq, softirq, steal; guest and guest_nice are already
	// inside user and nice, so they are not added again).
	Idle, Total uint64
}

// ReadHostCPU reads /proc/stat.
func ReadHostCPU() (HostCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return HostCPU{}, err
	}
	return parseHostCPU(b)
}

// parseHostCPU parses the aggregate "cpu " line of /proc/stat's contents.
func parseHostCPU(b []byte) (HostCPU, error) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(f) < 5 {
			return HostCPU{}, fmt.Errorf("/proc/stat: %d fields on the cpu line, want >= 5", len(f))
		}
		var v [8]uint64
		for i := 0; i < len(v) && i+1 < len(f); i++ {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return HostCPU{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		var h HostCPU
		for _, n := range v {
			h.Total += n
		}
		h.Idle = v[3] + v[4]
		return h, nil
	}
	return HostCPU{}, fmt.Errorf("/proc/stat: no aggregate cpu line")
}

// IdleShare is the share of the machine's CPU time that was idle between
// h0 and h (0..1; -1 when no time passed).
func (h HostCPU) IdleShare(h0 HostCPU) float64 {
	if h.Total <= h0.Total {
		return -1
	}
	return float64(h.Idle-h0.Idle) / float64(h.Total-h0.Total)
}

// Busy is the CPU time the machine spent busy (all CPUs together) between
// h0 and h.
func (h HostCPU) Busy(h0 HostCPU) time.Duration {
	busy := (h.Total - h.Idle) - (h0.Total - h0.Idle)
	return ticksToDuration(busy, clockTicks())
}
