package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends (after the processes stopped: cleanups
// run last-in first-out). It needs root, as the fault suite does.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs (needs root): %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes a file until less than leave bytes are free on dir's
// filesystem, and returns its path.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "fill")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		free := int64(st.Bavail) * st.Bsize
		if free < leave {
			return path
		}
		if _, err := f.Write(chunk[:min(int64(len(chunk)), free-leave/2)]); err != nil {
			return path // full
		}
	}
}

func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	res, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestFullDisk runs a real edge on a 24 MiB tmpfs, the
// data dir small enough that a fixed 1 GiB events stream could not start:
// it starts; the disk is filled to its last 600 KiB: hooks get 503, never
// 2xx, /readyz turns 503 naming the failed write and the storage gauge 0;
// once the space is freed the process exits with status 3 (its embedded
// JetStream cannot write again without a restart), and started again on
// the same data dir it is ready, holds every hook it acked and accepts new
// ones. A second process on the data dir meanwhile is refused.
func TestFullDisk(t *testing.T) {
	bin := buildEdge(t)
	data := filepath.Join(mountTmpfs(t, 24<<20), "d")
	hp, np := testkit.FreePort(t), testkit.FreePort(t)
	p := startEdge(t, bin, data, hp, np)

	// The data dir is locked.
	second := exec.Command(bin, "--data-dir", data, "--http-addr", "127.0.0.1:0", "--nats-listen", "off")
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "locked by another sluice process") {
		t.Fatalf("a second process on the data dir: %v\n%s", err, out)
	}

	filled := fill(t, filepath.Dir(data), 600<<10)
	body := append([]byte(`{"pad":"`), append(bytes.Repeat([]byte("x"), 60<<10), []byte(`"}`)...)...)
	client := &http.Client{Timeout: 10 * time.Second}
	acked := map[string]bool{}
	codes := map[int]int{}
	post := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, p.httpU+"/v1/hooks/t/s", bytes.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("post %s: %v", key, err)
		}
		defer res.Body.Close()
		var b struct{ ID string }
		_ = json.NewDecoder(res.Body).Decode(&b)
		if res.StatusCode/100 == 2 {
			acked[b.ID] = true
		}
		codes[res.StatusCode]++
		return res.StatusCode
	}
	for i := 0; codes[503] < 5; i++ {
		if i == 200 {
			t.Fatalf("no 503 after 200 hooks on a full disk: %v", codes)
		}
		if c := post("full-" + strconv.Itoa(i)); c != 202 && c != 503 {
			t.Fatalf("status %d on a full disk", c)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, reason := readyz(t, p.httpU)
		if code == 503 && strings.Contains(reason, "cannot write") {
			t.Logf("full disk: answers %v; /readyz %d %s", codes, code, reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %s on a full disk", code, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Once the store cannot write, a hook is refused before any of its
	// writes: 503 store_unavailable, no quota hit made (none of its
	// writes could be made durable, and each would wait out its timeout).
	hits := testkit.ScrapeLine(t, p.httpU, "sluice_edge_hit_seconds_count")
	for i := range 3 {
		if c := post("refused-" + strconv.Itoa(i)); c != 503 {
			t.Fatalf("a hook on a store that cannot write: status %d, want 503", c)
		}
	}
	if after := testkit.ScrapeLine(t, p.httpU, "sluice_edge_hit_seconds_count"); after != hits {
		t.Errorf("hooks refused on a store that cannot write still made quota hits: %q, then %q", hits, after)
	}
	res, err := http.Get(p.httpU + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(m), "\nsluice_jetstream_storage_ok 0\n") {
		t.Fatalf("metrics lack sluice_jetstream_storage_ok 0")
	}

	// Space is back: the process exits 3 for its supervisor.
	if err := os.Remove(filled); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("exit after the space came back: %v, want status 3\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after the space came back\n%s", p.stderr.String())
	}

	// Restarted on the same data dir: every acked hook is there.
	p2 := startEdge(t, bin, data, hp, np)
	stored := storedHookIDs(t, p2.natsU)
	for id := range acked {
		if !stored[id] {
			t.Errorf("hook %s acked before the disk filled is not stored after the restart", id)
		}
	}
	t.Logf("%d hooks acked, %d stored after the restart", len(acked), len(stored))
	p = p2
	if c := post("after"); c != 202 {
		t.Fatalf("after the restart: status %d", c)
	}
}
