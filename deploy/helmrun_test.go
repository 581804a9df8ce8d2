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

	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/webhook"
)

// podFiles writes what a pod's volumes hold — the ConfigMap's file and a
// key file — into dir and returns their paths.
func podFiles(t *testing.T, docs []obj, dir string) (cfgFile, keyFile string) {
	t.Helper()
	cfgFile = filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgFile, []byte(str(one(t, docs, "ConfigMap"), "data", "sluice.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile = filepath.Join(dir, "secrets.keys")
	if err := os.WriteFile(keyFile, []byte("k1 "+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgFile, keyFile
}

// postSigned sends the ci values' tenant a hook signed with its source's
// secret (the Secret's acme-gh) and wants 202.
func postSigned(t *testing.T, n *node) {
	t.Helper()
	body := []byte(`{"zen":"deploy"}`)
	req, err := http.NewRequest("POST", "http://"+*n.http.Addr.Load()+"/v1/hooks/acme/gh", bytes.NewReader(body))
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
		t.Fatalf("a signed hook: %d, want 202", res.StatusCode)
	}
}

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
	cfgFile, keyFile := podFiles(t, docs, dir)
	ports := []int{testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)}
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
	postSigned(t, nodes[0])
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

// TestHelmClientRuns: a pod of mode client, started with the chart's
// flags, file and environment, signs in to a NATS server with JetStream as
// the Secret's user and password (--nats-url the server's address; one
// server, so --set client.streamReplicas=1 as for a one-server NATS) and
// stores a signed hook there.
func TestHelmClientRuns(t *testing.T) {
	docs := render(t, "helm/sluice/ci/client-values.yaml", "client.streamReplicas=1")
	c := get(one(t, docs, "Deployment"), "spec", "template", "spec", "containers", 0)
	env := podEnv(c)
	if env["SLUICE_NATS_USER"] == "" || env["SLUICE_NATS_PASSWORD"] == "" {
		t.Fatalf("the pod's NATS credentials: %v", env)
	}
	k := testkit.New(t, testkit.WithListener(), func(cfg *natsembed.ServerConfig) {
		cfg.Users = []natsembed.User{{Name: env["SLUICE_NATS_USER"], Password: env["SLUICE_NATS_PASSWORD"], Publish: []string{">"}, Subscribe: []string{">"}}}
	})
	dir := t.TempDir()
	cfgFile, keyFile := podFiles(t, docs, dir)
	var args []string
	for _, a := range list(c, "args") {
		s := a.(string)
		name, _, _ := strings.Cut(s, "=")
		switch name {
		case "--config":
			s = name + "=" + cfgFile
		case "--secrets-key-file":
			s = name + "=" + keyFile
		case "--data-dir":
			s = name + "=" + dir
		case "--http-addr":
			s = name + "=127.0.0.1:0"
		case "--nats-url":
			s = name + "=" + k.Server.ClientURL()
		}
		args = append(args, s)
	}
	n, err := startNode(t, append(args, "--partitions", "4"), func(key string) string { return env[key] })
	if err != nil {
		t.Fatalf("pod start: %v", err)
	}
	postSigned(t, n)
	st, err := k.JS.Stream(testkit.Context(t), "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(testkit.Context(t)); err != nil || info.State.Msgs != 1 {
		t.Fatalf("HOOKS on the NATS server: %+v, %v; want the hook", info, err)
	}
}
