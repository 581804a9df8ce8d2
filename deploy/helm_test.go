// Package deploy holds the tests of the deployment artifacts: the Helm
// chart, the container image, the systemd unit and the monitoring files
// (docs/DEPLOY.md). The artifacts are checked against the code they deploy:
// every flag they pass is one of config's, every metric they read is one the
// app registers.
package deploy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/config"
)

// helmModule is the helm release the tests run through `go run` (the Go
// build cache keeps the binary: about 1 s a call once built, ~2.5 min of
// CPU to build it the first time). SLUICE_HELM names a helm binary instead.
const helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

const chartDir = "helm/sluice"

// helm runs helm with args and returns its stdout; a failure is an error
// with stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	name := "go"
	if bin := os.Getenv("SLUICE_HELM"); bin != "" {
		name = bin
	} else {
		args = append([]string{"run", helmModule}, args...)
	}
	out, _, err := output("", nil, name, args...)
	return string(out), err
}

// obj is one decoded manifest (or part of one).
type obj = map[string]any

// render templates the chart with a values file and decodes the manifests.
func render(t *testing.T, valuesFile string, set ...string) []obj {
	t.Helper()
	args := []string{"template", "rel", chartDir, "--namespace", "hooks", "-f", valuesFile}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	var docs []obj
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var d obj
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered manifests: %v\n%s", err, out)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

// get walks m along keys (map keys, or list indexes as ints).
func get(m any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			mm, _ := m.(obj)
			m = mm[k]
		case int:
			l, _ := m.([]any)
			if k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func str(m any, keys ...any) string { s, _ := get(m, keys...).(string); return s }
func list(m any, keys ...any) []any { l, _ := get(m, keys...).([]any); return l }

// find returns the manifests of kind.
func find(docs []obj, kind string) []obj {
	var out []obj
	for _, d := range docs {
		if d["kind"] == kind {
			out = append(out, d)
		}
	}
	return out
}

func one(t *testing.T, docs []obj, kind string) obj {
	t.Helper()
	f := find(docs, kind)
	if len(f) != 1 {
		t.Fatalf("%d %s manifests, want 1", len(f), kind)
	}
	return f[0]
}

// byName returns the list entry whose "name" is name.
func byName(l []any, name string) obj {
	for _, e := range l {
		if m, ok := e.(obj); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// flags splits args "--name=value" into a map, failing on anything else
// and on a flag config does not know.
func flags(t *testing.T, args []any) map[string]string {
	t.Helper()
	out := map[string]string{}
	known := config.Flags()
	for _, a := range args {
		s, _ := a.(string)
		name, v, ok := strings.Cut(strings.TrimPrefix(s, "--"), "=")
		if !strings.HasPrefix(s, "--") || !ok {
			t.Fatalf("argument %q: want --flag=value", s)
		}
		if !slices.Contains(known, name) {
			t.Fatalf("argument %q: edge has no flag --%s", s, name)
		}
		out[name] = v
	}
	return out
}

// secretValue stands for the Secret's value of key in the tests (long
// enough for every token's minimum).
func secretValue(key string) string { return "secret-value-of-" + key + "-0123456789" }

// podEnv is a container's environment as the pod would see it, every
// secretKeyRef replaced by secretValue of its key.
func podEnv(c any) map[string]string {
	env := map[string]string{}
	for _, e := range list(c, "env") {
		if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
			env[str(e, "name")] = secretValue(str(ref, "key"))
		} else {
			env[str(e, "name")] = str(e, "value")
		}
	}
	return env
}

// podNATSEnv sets the pod's variables that are no flag's twin in the
// process's environment, where nats-server reads a --nats-config's $NAME.
func podNATSEnv(t *testing.T, env map[string]string) {
	for k, v := range env {
		if !strings.HasPrefix(k, config.EnvPrefix) {
			t.Setenv(k, v)
		}
	}
}

// podNATSConf writes the ConfigMap's nats.conf into dir.
func podNATSConf(t *testing.T, cm obj, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(p, []byte(str(cm, "data", "nats.conf")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// podNATSContext writes what the ci values' Secret holds at nats-context: a
// nats CLI context signing in as user sluice with the Secret's
// nats-password.
func podNATSContext(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "context.json")
	if err := os.WriteFile(p, fmt.Appendf(nil, `{"user": "sluice", "password": %q}`, secretValue("nats-password")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkPod checks what both modes' pods must have: probes on the edge's
// own endpoints, non-root, read-only root, every secret from the Secret,
// and a configuration the edge accepts. It returns the container's flags.
func checkPod(t *testing.T, spec obj, cm obj) map[string]string {
	t.Helper()
	c := get(spec, "containers", 0)
	f := flags(t, list(c, "args"))
	if f["http-addr"] != "0.0.0.0:8080" || get(byName(list(c, "ports"), "http"), "containerPort") != 8080 {
		t.Errorf("HTTP: --http-addr %q, ports %v", f["http-addr"], list(c, "ports"))
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": "/healthz"} {
		if str(c, probe, "httpGet", "path") != path || get(c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v, want GET %s on port http", probe, get(c, probe), path)
		}
	}
	if get(spec, "securityContext", "runAsNonRoot") != true || get(spec, "securityContext", "runAsUser") != 65532 ||
		get(spec, "securityContext", "fsGroup") != 65532 {
		t.Errorf("pod securityContext %v: want non-root 65532 with fsGroup 65532 (the volume writable)", get(spec, "securityContext"))
	}
	if get(c, "securityContext", "readOnlyRootFilesystem") != true || get(c, "securityContext", "allowPrivilegeEscalation") != false ||
		!slices.Contains(list(c, "securityContext", "capabilities", "drop"), any("ALL")) {
		t.Errorf("container securityContext %v", get(c, "securityContext"))
	}
	mounts := map[string]string{}
	for _, m := range list(c, "volumeMounts") {
		mounts[str(m, "mountPath")] = str(m, "name")
	}
	if mounts["/data"] != "data" || f["data-dir"] != "/data" {
		t.Errorf("--data-dir %q, mounts %v: want the data volume at /data", f["data-dir"], mounts)
	}
	volumes := map[string]obj{}
	for _, v := range list(spec, "volumes") {
		volumes[str(v, "name")] = v.(obj)
	}
	// A file flag points into a volume mounted read-only from a Secret (or
	// the ConfigMap for --config).
	fromVolume := func(flag, wantSource string) obj {
		t.Helper()
		p := f[flag]
		dir, file := filepath.Split(p)
		name := mounts[strings.TrimSuffix(dir, "/")]
		v := volumes[name]
		if p == "" || v == nil || get(v, wantSource) == nil {
			t.Errorf("--%s %q: not in a %s volume (mount %q: %v)", flag, p, wantSource, name, v)
			return nil
		}
		if wantSource == "secret" {
			item := get(v, "secret", "items", 0)
			if str(item, "path") != file || str(v, "secret", "secretName") != "rel-sluice" {
				t.Errorf("--%s %q: secret volume %v", flag, p, v)
			}
		}
		return v
	}
	fromVolume("config", "configMap")
	fromVolume("secrets-key-file", "secret")
	// Secrets only from the Secret: every SLUICE_ variable is a flag's twin,
	// and every secret flag's twin comes from a secretKeyRef.
	twins := map[string]string{}
	for _, name := range config.Flags() {
		twins[config.EnvName(name)] = name
	}
	env := podEnv(c)
	for _, e := range list(c, "env") {
		name := str(e, "name")
		if strings.HasPrefix(name, config.EnvPrefix) && twins[name] == "" {
			t.Errorf("env %s is no flag's twin", name)
		}
		if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
			if str(ref, "name") != "rel-sluice" || str(ref, "key") == "" {
				t.Errorf("env %s: secretKeyRef %v", name, ref)
			}
		} else if strings.Contains(strings.ToLower(name), "token") || strings.Contains(strings.ToLower(name), "password") || strings.Contains(strings.ToLower(name), "secret") {
			t.Errorf("env %s is not from a Secret: %v", name, e)
		}
	}
	if _, ok := env["SLUICE_ADMIN_TOKEN"]; !ok {
		t.Error("no SLUICE_ADMIN_TOKEN from the Secret")
	}
	// The edge accepts this configuration: the chart's flags, the
	// ConfigMap's file, the environment.
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgFile, []byte(str(cm, "data", "sluice.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	podNATSEnv(t, env)
	var args []string
	for _, a := range list(c, "args") {
		s := a.(string)
		switch name, _, _ := strings.Cut(s, "="); name {
		case "--config":
			s = "--config=" + cfgFile
		case "--nats-config":
			s = "--nats-config=" + podNATSConf(t, cm, dir)
		case "--nats-context":
			s = "--nats-context=" + podNATSContext(t, dir)
		}
		args = append(args, s)
	}
	if _, err := config.Parse(args, func(k string) string { return env[k] }, nil); err != nil {
		t.Errorf("the edge refuses the chart's configuration: %v\nargs %q", err, args)
	}
	return f
}

// TestHelmChart: helm lint passes for both modes, and the rendered
// manifests have what running sluice needs — the cluster's StatefulSet
// with routes through the headless service, volumes, anti-affinity,
// probes, secrets from the Secret — with flags the edge accepts.
func TestHelmChart(t *testing.T) {
	for _, v := range []string{"helm/sluice/ci/cluster-values.yaml", "helm/sluice/ci/client-values.yaml"} {
		if out, err := helm(t, "lint", "--strict", chartDir, "-f", v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	t.Run("cluster", func(t *testing.T) {
		docs := render(t, "helm/sluice/ci/cluster-values.yaml")
		sts := one(t, docs, "StatefulSet")
		if len(find(docs, "Deployment")) != 0 {
			t.Error("mode cluster renders a Deployment")
		}
		if get(sts, "spec", "replicas") != 3 || str(sts, "spec", "podManagementPolicy") != "Parallel" {
			t.Errorf("StatefulSet: replicas %v, podManagementPolicy %v; want 3, Parallel (readiness needs the quorum)",
				get(sts, "spec", "replicas"), get(sts, "spec", "podManagementPolicy"))
		}
		spec := get(sts, "spec", "template", "spec").(obj)
		f := checkPod(t, spec, one(t, docs, "ConfigMap"))
		// Routes: every pod by its stable name through the headless service.
		headless := str(sts, "spec", "serviceName")
		var hs obj
		for _, s := range find(docs, "Service") {
			if str(s, "metadata", "name") == headless {
				hs = s
			}
		}
		if hs == nil || str(hs, "spec", "clusterIP") != "None" || get(hs, "spec", "publishNotReadyAddresses") != true {
			t.Fatalf("headless service %q: %v", headless, hs)
		}
		port := get(byName(list(hs, "spec", "ports"), "cluster"), "port")
		c := get(spec, "containers", 0)
		if port != 6222 || get(byName(list(c, "ports"), "cluster"), "containerPort") != 6222 || f["cluster-listen"] != "0.0.0.0:6222" {
			t.Errorf("cluster port: service %v, container %v, --cluster-listen %q", port, list(c, "ports"), f["cluster-listen"])
		}
		var want []string
		for i := range 3 {
			want = append(want, fmt.Sprintf("nats-route://%s-%d.%s.hooks.svc.cluster.local:6222", str(sts, "metadata", "name"), i, headless))
		}
		if f["routes"] != strings.Join(want, ",") {
			t.Errorf("--routes %q, want %q", f["routes"], strings.Join(want, ","))
		}
		if f["replicas"] != "3" {
			t.Errorf("--replicas %q, want 3 (R3 buckets and streams)", f["replicas"])
		}
		env := list(c, "env")
		if ref := get(byName(env, "NATS_CLUSTER_TOKEN"), "valueFrom", "secretKeyRef"); str(ref, "key") != "cluster-token" {
			t.Errorf("NATS_CLUSTER_TOKEN: %v, want the Secret's cluster-token", ref)
		}
		conf := str(one(t, docs, "ConfigMap"), "data", "nats.conf")
		if !strings.Contains(conf, "name: rel-sluice") || !strings.Contains(conf, "password: $NATS_CLUSTER_TOKEN") || f["nats-config"] != "/etc/sluice/config/nats.conf" {
			t.Errorf("--nats-config %q, nats.conf:\n%s\nwant the cluster's name and the routes' password from the Secret", f["nats-config"], conf)
		}
		// The store on a volume claim per pod.
		vct := get(sts, "spec", "volumeClaimTemplates", 0)
		if str(vct, "metadata", "name") != "data" || str(vct, "spec", "resources", "requests", "storage") != "10Gi" {
			t.Errorf("volumeClaimTemplates: %v", get(sts, "spec", "volumeClaimTemplates"))
		}
		// No two pods on one node.
		term := get(spec, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0)
		if str(term, "topologyKey") != "kubernetes.io/hostname" ||
			str(term, "labelSelector", "matchLabels", "app.kubernetes.io/instance") != "rel" {
			t.Errorf("anti-affinity: %v", get(spec, "affinity"))
		}
		soft := one(t, render(t, "helm/sluice/ci/cluster-values.yaml", "antiAffinity=soft"), "StatefulSet")
		if get(soft, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "weight") != 100 {
			t.Errorf("antiAffinity=soft: %v", get(soft, "spec", "template", "spec", "affinity"))
		}
		if pdb := one(t, docs, "PodDisruptionBudget"); get(pdb, "spec", "maxUnavailable") != 1 {
			t.Errorf("PodDisruptionBudget: %v", get(pdb, "spec"))
		}
	})
	t.Run("client", func(t *testing.T) {
		docs := render(t, "helm/sluice/ci/client-values.yaml")
		if len(find(docs, "StatefulSet")) != 0 {
			t.Error("mode client renders a StatefulSet")
		}
		d := one(t, docs, "Deployment")
		spec := get(d, "spec", "template", "spec").(obj)
		f := checkPod(t, spec, one(t, docs, "ConfigMap"))
		if f["nats-url"] != "nats://nats:4222" {
			t.Errorf("--nats-url %q, want the NATS chart's service", f["nats-url"])
		}
		for _, flag := range []string{"cluster-listen", "routes", "nats-config"} {
			if _, ok := f[flag]; ok {
				t.Errorf("client mode passes --%s", flag)
			}
		}
		c := get(spec, "containers", 0)
		if f["nats-context"] != "/etc/sluice/nats/context.json" {
			t.Errorf("--nats-context %q, want the Secret's context", f["nats-context"])
		}
		if byName(list(c, "env"), "NATS_CLUSTER_TOKEN") != nil {
			t.Error("client mode reads a cluster token")
		}
	})
	// What the chart refuses to render.
	for _, c := range []struct{ name, want string }{
		{"mode=bogus", "neither cluster nor client"},
		{"config=", "config: the --config YAML"},
	} {
		if _, err := helm(t, "template", "rel", chartDir, "-f", "helm/sluice/ci/cluster-values.yaml", "--set", c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
