package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// child is a process the bench started. It dies with the bench (Pdeathsig)
// and is stopped by stop: SIGTERM, then SIGKILL after a grace period.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startChild starts name with args and env (nil: the bench's environment).
func startChild(name, bin string, args, env []string) (*child, error) {
	c := &child{name: name, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = env
	c.cmd.Stdout = c.out
	c.cmd.Stderr = c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, SIGKILL after grace. Safe to call twice.
func (c *child) stop(grace time.Duration) {
	if c == nil || c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// waitHTTP polls url until it answers 200, the process exits, or ctx ends.
func (c *child) waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		res, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited (%v) before %s answered 200:\n%s", c.name, c.err, url, c.out.String())
		case <-ctx.Done():
			return fmt.Errorf("%s: %s did not answer 200: %w (last: %v)\n%s", c.name, url, ctx.Err(), err, c.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitTCP polls addr until it accepts a connection.
func (c *child) waitTCP(ctx context.Context, addr string) error {
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited (%v) before listening on %s:\n%s", c.name, c.err, addr, c.out.String())
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not listening: %w", c.name, addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// Module paths of the bench and of the library it measures (the bench's
// go.mod replaces the library with the repository around it).
const (
	benchModule   = "github.com/sluice-dev/sluice/cmd/sluice-bench"
	libraryModule = "github.com/sluice-dev/sluice"
)

// moduleDirs are the directories of the library's module (root: the bench
// builds ./cmd/edge there) and of the bench's (bench: ./floor-server),
// as the go command resolves them from the working directory.
func moduleDirs(ctx context.Context) (root, bench string, err error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Path}} {{.Dir}}", benchModule, libraryModule).Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m %s %s: %w (run sluice-bench inside its module: cd cmd/sluice-bench)", benchModule, libraryModule, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		switch path {
		case benchModule:
			bench = dir
		case libraryModule:
			root = dir
		}
	}
	if root == "" || bench == "" {
		return "", "", errors.New("not inside sluice-bench's module: cd cmd/sluice-bench (or pass --edge-bin and skip the edge row)")
	}
	return root, bench, nil
}

// buildCommand builds the command ./pkg of module directory dir into
// binDir and returns the binary's path.
func buildCommand(ctx context.Context, dir, pkg, binDir string) (string, error) {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./%s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
