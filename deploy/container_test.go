package deploy

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/config"
)

// imageConfig is what `podman image inspect` says of an image's runtime
// configuration (the Docker image format, which keeps HEALTHCHECK).
type imageConfig struct {
	Config struct {
		User         string              `json:"User"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Volumes      map[string]struct{} `json:"Volumes"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		WorkingDir   string              `json:"WorkingDir"`
		StopSignal   string              `json:"StopSignal"`
	} `json:"Config"`
	Healthcheck *struct {
		Test []string `json:"Test"`
	} `json:"Healthcheck"`
}

// systemCAs is where Go's crypto/x509 finds the CA bundle on Debian (and
// in the image).
const systemCAs = "/etc/ssl/certs/ca-certificates.crt"

// TestContainerImage builds the Containerfile as docs/DEPLOY.md says (the
// static binary built outside, podman build --format docker) and inspects
// the image: the edge as entrypoint, a non-root user, /data a volume the
// user owns and the node's --data-dir, a health check through `edge
// healthcheck`, and an environment the edge accepts. podman run is not
// possible here (the sandbox's rlimits refuse it): build and inspect is the
// test.
func TestContainerImage(t *testing.T) {
	podman := tool(t, "podman", "podman")
	ctx := t.TempDir()
	run(t, "..", []string{"CGO_ENABLED=0"}, "go", "build", "-o", filepath.Join(ctx, "edge"), "./cmd/edge")
	if err := os.Mkdir(filepath.Join(ctx, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	cas, err := os.ReadFile(systemCAs)
	if err != nil {
		t.Fatalf("the build copies the host's CA bundle (Debian's ca-certificates): %v", err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "ca-certificates.crt"), cas, 0o644); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tag := "localhost/sluice-edge-test:" + hex.EncodeToString(b)
	run(t, "..", nil, podman, "build", "--quiet", "--format", "docker", "-t", tag, "-f", "Containerfile", ctx)
	t.Cleanup(func() { _, _, _ = output("", nil, podman, "rmi", "--force", tag) })

	var inspected []imageConfig
	if err := json.Unmarshal(run(t, "", nil, podman, "image", "inspect", tag), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("podman image inspect: %v (%d images)", err, len(inspected))
	}
	img := inspected[0]
	c := img.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/edge"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q: want the edge, flags given by the runtime", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("volumes %v, want /data", c.Volumes)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v: no 8080/tcp", c.ExposedPorts)
	}
	if img.Healthcheck == nil || !slices.Equal(img.Healthcheck.Test, []string{"CMD", "/usr/local/bin/edge", "healthcheck"}) {
		t.Errorf("healthcheck %+v, want CMD edge healthcheck (/readyz)", img.Healthcheck)
	}
	// The environment: flags' twins the edge accepts, the store in the
	// volume; without tenants a node on 0.0.0.0 refuses to start (the
	// runtime gives it --config), with them it starts.
	env := map[string]string{}
	twins := map[string]bool{}
	for _, f := range config.Flags() {
		twins[config.EnvName(f)] = true
	}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.EnvPrefix) && !twins[k] {
			t.Errorf("image env %s is no flag's twin", k)
		}
		env[k] = v
	}
	if env["SLUICE_DATA_DIR"] != "/data" {
		t.Errorf("SLUICE_DATA_DIR %q, want the volume /data", env["SLUICE_DATA_DIR"])
	}
	getenv := func(k string) string { return env[k] }
	if _, err := config.Parse(nil, getenv, nil); err == nil || !strings.Contains(err.Error(), "no tenants are listed") {
		t.Errorf("the image's environment without --config: %v, want the refusal to serve no tenants on 0.0.0.0", err)
	}
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("tenants:\n  acme:\n    sources:\n      gh: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]string{"--config", file}, getenv, nil); err != nil {
		t.Errorf("the image's environment with --config: %v", err)
	}
	// The layers: /data owned by the user, the edge executable by it.
	archive := filepath.Join(t.TempDir(), "image.tar")
	run(t, "", nil, podman, "image", "save", "--quiet", "--format", "docker-archive", "-o", archive, tag)
	files := layerFiles(t, archive)
	if h, ok := files["data/"]; !ok || h.Uid != 65532 || h.Gid != 65532 || h.Typeflag != tar.TypeDir {
		t.Errorf("/data in the image: %+v, want a directory owned by 65532:65532", h)
	}
	if h, ok := files["usr/local/bin/edge"]; !ok || h.Mode&0o005 != 0o005 || h.Size == 0 {
		t.Errorf("/usr/local/bin/edge in the image: %+v", h)
	}
	if h, ok := files[strings.TrimPrefix(systemCAs, "/")]; !ok || h.Size != int64(len(cas)) {
		t.Errorf("%s in the image: %+v, want the CA bundle", systemCAs, h)
	}
	for name := range files {
		if !strings.HasPrefix(name, "data/") && !strings.HasPrefix(name, "usr/") && !strings.HasPrefix(name, "etc/") {
			t.Errorf("unexpected file in the image: %s", name)
		}
	}
}

// layerFiles reads a docker-archive's layers and returns their files by
// path.
func layerFiles(t *testing.T, archive string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	outer := tar.NewReader(f)
	files := map[string]*tar.Header{}
	layers := 0
	for {
		h, err := outer.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(h.Name, ".tar") {
			continue
		}
		layers++
		inner := tar.NewReader(outer)
		for {
			ih, err := inner.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", h.Name, err)
			}
			files[ih.Name] = ih
		}
	}
	if layers == 0 {
		t.Fatal("the image archive has no layers")
	}
	return files
}
