package faults

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// cpuSample is the machine's busy CPU time and this test process tree's
// share of it (the test process, its reaped children and its live
// children: the nodes and servers it started), in clock ticks.
type cpuSample struct {
	at          time.Time
	machine, us int64
}

func sampleCPU() cpuSample {
	return cpuSample{at: time.Now(), machine: machineBusy(), us: treeCPU()}
}

// otherCores is how many cores processes outside this test's tree kept
// busy on average between s and a later sample e (other agents' builds
// and tests on a shared machine): what a latency figure of the window was
// up against. -1 when /proc cannot be read.
func otherCores(s, e cpuSample) float64 {
	if s.machine < 0 || e.machine < 0 || s.us < 0 || e.us < 0 {
		return -1
	}
	secs := e.at.Sub(s.at).Seconds()
	if secs <= 0 {
		return -1
	}
	return max(0, float64((e.machine-s.machine)-(e.us-s.us))/clockTicks/secs)
}

// machineBusy is the busy time of all CPUs (/proc/stat: user, nice,
// system, irq, softirq, steal).
func machineBusy() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return -1
		}
		busy += n
	}
	return busy
}

// treeCPU is this process's CPU time with that of its reaped children,
// plus that of its live children.
func treeCPU() int64 {
	self := os.Getpid()
	f := procStat(self)
	if f == nil {
		return -1
	}
	total := statTicks(f, 11, 12, 13, 14) // utime stime cutime cstime
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || pid == self {
			continue
		}
		if f := procStat(pid); f != nil && f[1] == strconv.Itoa(self) {
			total += statTicks(f, 11, 12)
		}
	}
	return total
}

// procStat returns the fields of /proc/pid/stat after the command name
// (f[0] is the state, f[1] the parent pid), or nil.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return nil
	}
	return f
}

func statTicks(f []string, idx ...int) int64 {
	var n int64
	for _, i := range idx {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return n
}
