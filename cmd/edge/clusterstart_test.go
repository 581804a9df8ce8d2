package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// TestClusterStartWaitsForLatePeer: a fresh three-node cluster (--replicas
// 3, as docs/CLUSTER.md and docs/BACKUP.md start it) whose third node
// starts 35 s after the other two still forms. A fresh cluster elects its
// first JetStream meta leader only once every one of its servers runs, so
// the first two wait for the third; each start-up step used to give up
// after 30 s, and the two exited before it came (then it, alone, 30 s
// later): the cluster never became ready. A node slow to start on a loaded
// machine did the same to its peers (docs/BACKUP.md's doc test in CI).
func TestClusterStartWaitsForLatePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster of real processes for 40 s; skipped with -short")
	}
	t.Parallel()
	bin := buildEdge(t)
	dir := t.TempDir()
	ports := testkit.FreePorts(t, 9) // http, client, cluster of each node
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[6+i]))
	}
	type node struct {
		cmd    *exec.Cmd
		log    string
		exited chan error
	}
	nodes := make([]*node, 3)
	start := func(i int) {
		log := filepath.Join(dir, fmt.Sprintf("n%d.log", i+1))
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(bin, "--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[6+i]),
			"--routes", strings.Join(routes, ","), "--replicas", "3", "--partitions", "4")
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n := &node{cmd: cmd, log: log, exited: make(chan error, 1)}
		go func() { n.exited <- cmd.Wait() }()
		nodes[i] = n
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				_ = n.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, n := range nodes {
			if n == nil {
				continue
			}
			select {
			case <-n.exited:
			case <-time.After(15 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
			}
		}
	})
	logs := func() string {
		var b strings.Builder
		for i, n := range nodes {
			if n == nil {
				continue
			}
			data, _ := os.ReadFile(n.log)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			fmt.Fprintf(&b, "\n--- node %d, last lines:\n%s\n", i+1, strings.Join(lines[max(0, len(lines)-12):], "\n"))
		}
		return b.String()
	}
	alive := func() {
		t.Helper()
		for i, n := range nodes {
			if n == nil {
				continue
			}
			select {
			case err := <-n.exited:
				n.exited <- err
				t.Fatalf("node %d exited (%v) while the cluster was forming:%s", i+1, err, logs())
			default:
			}
		}
	}

	start(0)
	start(1)
	// Past the 30 s each start-up step waited: nodes 1 and 2 must still be
	// there, waiting for node 3.
	for late := time.Now().Add(35 * time.Second); time.Now().Before(late); time.Sleep(500 * time.Millisecond) {
		alive()
	}
	// Meanwhile they say what they wait for.
	if data, _ := os.ReadFile(nodes[0].log); !strings.Contains(string(data), "still starting: waiting for the cluster") {
		t.Errorf("node 1 waited 35 s without saying so:%s", logs())
	}
	start(2)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range nodes {
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[i])
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			alive()
			if res, err := client.Get(url); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d not ready 90 s after node 3 started:%s", i+1, logs())
			}
		}
	}
}

// TestClusterStartEndsOnSignal: a node waiting for its cluster's peers at
// start (up to ClusterStartWait) stops at once on SIGTERM, not after the
// wait.
func TestClusterStartEndsOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real process; skipped with -short")
	}
	t.Parallel()
	bin := buildEdge(t)
	dir := t.TempDir()
	ports := testkit.FreePorts(t, 4)
	log := filepath.Join(dir, "n1.log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "--data-dir", filepath.Join(dir, "n1"),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--routes", fmt.Sprintf("nats-route://127.0.0.1:%d,nats-route://127.0.0.1:%d", ports[2], ports[3]), "--replicas", "3")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	// Waiting for JetStream: its embedded server is up and says it waits
	// for its routes (its peer never comes).
	testkit.Eventually(t, 30*time.Second, func() bool {
		data, _ := os.ReadFile(log)
		return strings.Contains(string(data), "embedded nats-server ready") &&
			strings.Contains(string(data), "Waiting for routing to be established")
	}, "the node waiting for its cluster")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		stopped = true
	case <-time.After(10 * time.Second):
		data, _ := os.ReadFile(log)
		t.Fatalf("still running 10 s after SIGTERM while waiting for its cluster:\n%s", data)
	}
}
