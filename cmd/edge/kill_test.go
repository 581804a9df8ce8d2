package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

func buildEdge(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edge")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd    *exec.Cmd
	httpU  string
	natsU  string
	stderr *bytes.Buffer
}

func startEdge(t *testing.T, bin, dataDir string, httpPort, natsPort int) *proc {
	t.Helper()
	p := &proc{
		httpU:  fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		natsU:  fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		stderr: &bytes.Buffer{},
	}
	p.cmd = exec.Command(bin,
		"--data-dir", dataDir,
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort),
		"--partitions", "4",
		"--log-level", "warn",
	)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	if err := testkit.WaitHTTP(p.httpU+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("edge not ready: %v\n%s", err, p.stderr.String())
	}
	return p
}

// TestKill9KeepsEveryAcceptedHook sends a stream of hooks to a real edge
// process, kill -9s it mid-load, restarts it on the same data dir and finds
// every hook that got a 2xx in the stream.
func TestKill9KeepsEveryAcceptedHook(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process; skipped with -short")
	}
	bin := buildEdge(t)
	data := t.TempDir()
	hp, np := testkit.FreePort(t), testkit.FreePort(t)
	p := startEdge(t, bin, data, hp, np)

	var mu sync.Mutex
	accepted := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	sent := make(chan struct{}, 1<<16)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 5000; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.httpU+"/v1/hooks/t/s", bytes.NewReader([]byte(`{"n":1}`)))
				req.Header.Set("Idempotency-Key", "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i))
				res, err := client.Do(req)
				if err != nil {
					return // the process died
				}
				var body struct{ ID string }
				_ = json.NewDecoder(res.Body).Decode(&body)
				res.Body.Close()
				if res.StatusCode/100 == 2 {
					mu.Lock()
					accepted[body.ID] = true
					mu.Unlock()
				}
				select {
				case sent <- struct{}{}:
				default:
				}
			}
		}()
	}
	// Kill after some hooks went through.
	for n := 0; n < 300; n++ {
		select {
		case <-sent:
		case <-ctx.Done():
			t.Fatalf("no load went through: %s", p.stderr.String())
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	wg.Wait()
	cancel()
	if len(accepted) == 0 {
		t.Fatal("nothing accepted before the kill")
	}

	p2 := startEdge(t, bin, data, hp, np)
	stored := storedHookIDs(t, p2.natsU)
	missing := 0
	for id := range accepted {
		if !stored[id] {
			missing++
		}
	}
	t.Logf("accepted %d before kill -9, stream holds %d after restart", len(accepted), len(stored))
	if missing > 0 {
		t.Fatalf("%d of %d accepted hooks missing after kill -9 and restart", missing, len(accepted))
	}
	// Graceful stop: SIGTERM exits 0 within 5 s.
	start := time.Now()
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	if err := p2.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p2.stderr.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("graceful stop took %v", d)
	}
}

// storedHookIDs reads the hook ids of the whole HOOKS stream through the
// edge's NATS listener.
func storedHookIDs(t *testing.T, natsURL string) map[string]bool {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Stop()
	stored := map[string]bool{}
	for range info.State.Msgs {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("reading HOOKS: %v", err)
		}
		stored[m.Headers().Get("Sluice-Hook-Id")] = true
	}
	return stored
}
