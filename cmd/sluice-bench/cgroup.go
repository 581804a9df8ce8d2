package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupPrefix names the cgroups the scale rows create, followed by the
// bench's pid: "sluice-bench-<pid>-<row>-node<i>".
const cgroupPrefix = "sluice-bench-"

// cfsPeriod is the CFS period of every quota (100 ms, the kernel's
// default): a node may run quota × 100 ms in each 100 ms.
const cfsPeriod = 100 * time.Millisecond

// cpuCgroups creates child cgroups of the CPU controller: cgroup v1's cpu
// hierarchy (cpu.cfs_quota_us, cpu.cfs_period_us) or, where that is not
// mounted, cgroup v2's (cpu.max).
type cpuCgroups struct {
	version int    // 1 or 2
	root    string // where the children are made
}

// findCPUCgroups finds a CPU controller this process can make cgroups
// under, or says why there is none.
func findCPUCgroups() (*cpuCgroups, error) {
	v1, v2, err := cgroupMounts("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var why []string
	if v1 != "" {
		c := &cpuCgroups{version: 1, root: v1}
		err := c.probe()
		if err == nil {
			return c, nil
		}
		why = append(why, fmt.Sprintf("cgroup v1 cpu at %s: %v", v1, err))
	}
	if v2 != "" {
		c := &cpuCgroups{version: 2, root: v2}
		err := c.probe()
		if err == nil {
			return c, nil
		}
		why = append(why, fmt.Sprintf("cgroup v2 at %s: %v", v2, err))
	}
	if len(why) == 0 {
		why = append(why, "neither cgroup v1's cpu controller nor cgroup v2 is mounted")
	}
	return nil, fmt.Errorf("no usable CPU cgroup (the scale rows need root and cgroup v1's cpu controller or cgroup v2 with cpu in cgroup.controllers; a row with quota 0 runs without one): %s", strings.Join(why, "; "))
}

// cgroupMounts reads a mounts file (/proc/self/mounts) for the mount point
// of cgroup v1's cpu controller and of cgroup v2.
func cgroupMounts(path string) (v1, v2 string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		dir, typ, opts := fields[1], fields[2], strings.Split(fields[3], ",")
		switch typ {
		case "cgroup":
			for _, o := range opts {
				if o == "cpu" && v1 == "" {
					v1 = dir
				}
			}
		case "cgroup2":
			if v2 == "" {
				v2 = dir
			}
		}
	}
	return v1, v2, sc.Err()
}

// probe checks that a child cgroup can be made here with a quota, and
// removes cgroups that earlier benches left behind (their pid is gone).
func (c *cpuCgroups) probe() error {
	if c.version == 2 {
		ctrl, err := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
		if err != nil {
			return err
		}
		if !strings.Contains(" "+strings.TrimSpace(string(ctrl))+" ", " cpu ") {
			return fmt.Errorf("no cpu in cgroup.controllers (%q)", strings.TrimSpace(string(ctrl)))
		}
		// Children get the cpu controller only once it is in the parent's
		// subtree_control.
		if err := os.WriteFile(filepath.Join(c.root, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return fmt.Errorf("enable cpu in cgroup.subtree_control: %w", err)
		}
	}
	c.removeStale()
	g, err := c.create(fmt.Sprintf("%s%d-probe", cgroupPrefix, os.Getpid()), 0.5)
	if err != nil {
		return err
	}
	return g.remove()
}

// removeStale removes the empty cgroups of benches that are no longer
// running (killed before they could clean up). rmdir refuses a cgroup that
// still has a process, so nothing in use is touched.
func (c *cpuCgroups) removeStale() {
	ents, err := os.ReadDir(c.root)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = syscall.Rmdir(filepath.Join(c.root, e.Name()))
	}
}

// cgroup is one child cgroup with a CPU quota.
type cgroup struct {
	dir string
}

// create makes the child cgroup name with a quota of cores CPUs (0.4: 40
// ms of CPU time per 100 ms).
func (c *cpuCgroups) create(name string, cores float64) (*cgroup, error) {
	if cores <= 0 {
		return nil, fmt.Errorf("quota %v cores: want > 0", cores)
	}
	dir := filepath.Join(c.root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	g := &cgroup{dir: dir}
	period := cfsPeriod.Microseconds()
	quota := int64(cores * float64(period))
	var err error
	if c.version == 1 {
		if err = g.write("cpu.cfs_period_us", strconv.FormatInt(period, 10)); err == nil {
			err = g.write("cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
		}
	} else {
		err = g.write("cpu.max", fmt.Sprintf("%d %d", quota, period))
	}
	if err != nil {
		_ = g.remove()
		return nil, err
	}
	return g, nil
}

func (g *cgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, filepath.Join(g.dir, file), err)
	}
	return nil
}

// add moves process pid (all its threads) into the cgroup.
func (g *cgroup) add(pid int) error {
	return g.write("cgroup.procs", strconv.Itoa(pid))
}

// remove deletes the cgroup; its processes must have exited (the kernel
// takes a moment to let go of a process that just exited, so it retries for
// a few seconds). Safe to call on nil and twice.
func (g *cgroup) remove() error {
	if g == nil {
		return nil
	}
	var err error
	for range 50 {
		err = syscall.Rmdir(g.dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", g.dir, err)
}
