package faults

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a child process whose output (stdout and stderr) is kept line by
// line. t.Cleanup kills it (after a SIGCONT, should it be stopped) and
// waits for it.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, set before done closes
}

// startProc starts bin with args and the environment env (nil: just PATH
// and HOME).
func startProc(t testing.TB, name, bin string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, out: &lines{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if env == nil {
		env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	}
	p.cmd.Env = env
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p, nil
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (the process gets no chance to clean up) and waits
// for it to exit.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to timeout for a clean exit.
func (p *proc) term(timeout time.Duration) error {
	if !p.running() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s: no exit within %v of SIGTERM", p.name, timeout)
	}
}

// stop freezes the process (SIGSTOP): its sockets stay open, nothing answers.
func (p *proc) stop() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// cont resumes a stopped process.
func (p *proc) cont() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// waitLine waits until a line of output satisfies match and returns it.
func (p *proc) waitLine(timeout time.Duration, match func(string) bool) (string, error) {
	deadline := time.Now().Add(timeout)
	from := 0
	for {
		ls, ch := p.out.since(from)
		for _, l := range ls {
			if match(l) {
				return l, nil
			}
		}
		from += len(ls)
		if !p.running() {
			return "", fmt.Errorf("%s exited (%v) before the line appeared:\n%s", p.name, p.err, p.out.tail(40))
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return "", fmt.Errorf("%s: line not seen within %v:\n%s", p.name, timeout, p.out.tail(40))
		}
		select {
		case <-ch:
		case <-p.done:
		case <-time.After(wait):
		}
	}
}

// lines is an io.Writer that keeps complete lines and wakes waiters.
type lines struct {
	mu      sync.Mutex
	partial []byte
	all     []string
	changed chan struct{}
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.all = append(l.all, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added && l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(b), nil
}

// since returns the lines from index from on and a channel closed at the
// next new line.
func (l *lines) since(from int) ([]string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	var out []string
	if from < len(l.all) {
		out = append(out, l.all[from:]...)
	}
	return out, l.changed
}

// tail returns the last n lines.
func (l *lines) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.all)-n)
	return strings.Join(l.all[from:], "\n")
}

// text returns everything written so far.
func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n") + "\n" + string(l.partial)
}
