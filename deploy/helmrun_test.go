package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// TestHelmClusterRuns: the three pods of mode cluster, started with the
// flags, file and environment the chart renders — only what a pod's
// network and volumes give it replaced by this machine's (each pod's DNS
// name by a loopback port, the mounts by temporary files) — form one
// nats-server cluster with R3 streams and serve a signed hook.
func TestHelmClusterRuns(t *testing.T) {
	docs := render(t, "helm/sluice/ci/cluster-values.yaml")
	sts := one(t, docs, "StatefulSet")
	c := get(sts, "spec", "template", "spec", "containers", 0)
	env := podEnv(c)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgFile, []byte(str(one(t, docs, "ConfigMap"), "data", "sluice.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(dir, "secrets.keys")
	if err := os.WriteFile(keyFile, []byte("k1 "+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := []int{freePort(t), freePort(t), freePort(t)}
	// nats-route://rel-sluice-<i>.rel-sluice-headless.hooks.svc.cluster.local:6222
	podRoute := regexp.MustCompile(`nats-route://rel-sluice-(\d)\.[a-z0-9.-]+:6222`)
	argsOf := func(pod int) []string {
		var out []string
		for _, a := range list(c, "args") {
			s := a.(string)
			name, _, _ := strings.Cut(s, "=")
			switch name {
			case "--config":
				s = name + "=" + cfgFile
			case "--secrets-key-file":
				s = name + "=" + keyFile
			case "--data-dir":
				s = name + "=" + filepath.Join(dir, fmt.Sprint(pod))
			case "--http-addr":
				s = name + "=127.0.0.1:0"
			case "--cluster-listen":
				s = fmt.Sprintf("%s=127.0.0.1:%d", name, ports[pod])
			case "--nats-listen":
				s = name + "=off"
			case "--routes":
				s = podRoute.ReplaceAllStringFunc(s, func(r string) string {
					return fmt.Sprintf("nats-route://127.0.0.1:%d", ports[r[len("nats-route://rel-sluice-")]-'0'])
				})
				if strings.Count(s, "127.0.0.1") != 3 {
					t.Fatalf("routes %q: want the three pods", s)
				}
			}
			out = append(out, s)
		}
		return append(out, "--partitions", "4")
	}
	nodes := make([]*node, 3)
	errs := make(chan error, 3)
	for i := range nodes {
		go func() {
			// Each start waits for a JetStream meta leader, which needs a
			// quorum: the pods start together (podManagementPolicy Parallel).
			var err error
			nodes[i], err = startNode(t, argsOf(i), func(k string) string { return env[k] })
			errs <- err
		}()
	}
	var failed []error
	for range nodes { // every start returns (bounded by its 90 s) before the test may end
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("pod start: %v", failed)
	}
	body := []byte(`{"zen":"deploy"}`)
	req, err := http.NewRequest("POST", "http://"+*nodes[0].http.Addr.Load()+"/v1/hooks/acme/gh", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub(secretValue("acme-gh"), body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("a signed hook to pod 0: %d, want 202", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := nodes[2].nats.JS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("HOOKS seen from pod 2: %+v, %v; want the hook in an R3 stream", info, err)
	}
}
