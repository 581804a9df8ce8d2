package deploy

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
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

// podArgs is container c's args with each flag named in local set to what
// local makes of the chart's value, then --partitions 4.
func podArgs(c any, local map[string]func(chart string) string) []string {
	var out []string
	for _, a := range list(c, "args") {
		s := a.(string)
		name, v, _ := strings.Cut(s, "=")
		if f, ok := local[name]; ok {
			s = name + "=" + f(v)
		}
		out = append(out, s)
	}
	return append(out, "--partitions", "4")
}

// podLocal replaces what every pod's mounts and network give it: the
// ConfigMap's file and the key file by cfgFile and keyFile, the data
// volume by dataDir, the HTTP port by a random loopback one.
func podLocal(cfgFile, keyFile, dataDir string) map[string]func(string) string {
	return map[string]func(string) string{
		"--config":           is(cfgFile),
		"--secrets-key-file": is(keyFile),
		"--data-dir":         is(dataDir),
		"--http-addr":        is("127.0.0.1:0"),
	}
}

// is replaces any value by v.
func is(v string) func(string) string { return func(string) string { return v } }

// postSigned sends the ci values' tenant a hook signed with its source's
// secret (the Secret's acme-gh) and wants 202.
func postSigned(t *testing.T, n *node) {
	t.Helper()
	body := []byte(`{"zen":"deploy"}`)
	sig := map[string]string{webhook.HeaderGitHubSignature: webhook.SignGitHub(secretValue("acme-gh"), body)}
	if r := testkit.HTTP(t, "POST", "http://"+*n.http.Addr.Load()+"/v1/hooks/acme/gh", body, sig); r.Code != http.StatusAccepted {
		t.Fatalf("a signed hook: %d %s, want 202", r.Code, r.Body)
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
	podNATSEnv(t, env)
	natsConf := podNATSConf(t, one(t, docs, "ConfigMap"), dir)
	ports := []int{testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)}
	// nats-route://rel-sluice-<i>.rel-sluice-headless.hooks.svc.cluster.local:6222
	podRoute := regexp.MustCompile(`nats-route://rel-sluice-(\d)\.[a-z0-9.-]+:6222`)
	argsOf := func(pod int) []string {
		local := podLocal(cfgFile, keyFile, filepath.Join(dir, fmt.Sprint(pod)))
		local["--cluster-listen"] = is(fmt.Sprintf("127.0.0.1:%d", ports[pod]))
		local["--nats-listen"] = is("off")
		local["--nats-config"] = is(natsConf)
		local["--routes"] = func(v string) string {
			v = podRoute.ReplaceAllStringFunc(v, func(r string) string {
				return fmt.Sprintf("nats-route://127.0.0.1:%d", ports[r[len("nats-route://rel-sluice-")]-'0'])
			})
			if strings.Count(v, "127.0.0.1") != 3 {
				t.Fatalf("routes %q: want the three pods", v)
			}
			return v
		}
		return podArgs(c, local)
	}
	nodes := testkit.StartTogether(t, 3, 2*time.Minute, "pod", func(i int, log *slog.Logger) (*node, error) {
		return startNodeLog(t, log, argsOf(i), func(k string) string { return env[k] })
	})
	postSigned(t, nodes[0])
	st, err := nodes[2].nats.JS.Stream(testkit.Context(t), "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.State.Msgs != 1 || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("HOOKS seen from pod 2: %+v; want the hook in an R3 stream", info)
	}
}

// TestHelmClientRuns: a pod of mode client, started with the chart's
// flags, file and environment, signs in to a NATS server with JetStream as
// the user and password of the Secret's nats CLI context (--nats-url the
// server's address; one server, so --set client.streamReplicas=1 as for a
// one-server NATS) and stores a signed hook there.
func TestHelmClientRuns(t *testing.T) {
	docs := render(t, "helm/sluice/ci/client-values.yaml", "client.streamReplicas=1")
	c := get(one(t, docs, "Deployment"), "spec", "template", "spec", "containers", 0)
	env := podEnv(c)
	k := testkit.New(t, testkit.WithListener(), testkit.WithUsers(natsembed.User{Name: "sluice", Password: secretValue("nats-password"), Publish: []string{">"}, Subscribe: []string{">"}}))
	dir := t.TempDir()
	cfgFile, keyFile := podFiles(t, docs, dir)
	local := podLocal(cfgFile, keyFile, dir)
	local["--nats-url"] = is(k.Server.ClientURL())
	local["--nats-context"] = is(podNATSContext(t, dir))
	n, err := startNode(t, podArgs(c, local), func(key string) string { return env[key] })
	if err != nil {
		t.Fatalf("pod start: %v", err)
	}
	postSigned(t, n)
	st, err := k.JS.Stream(testkit.Context(t), "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.State.Msgs != 1 {
		t.Fatalf("HOOKS on the NATS server: %+v; want the hook", info)
	}
}
