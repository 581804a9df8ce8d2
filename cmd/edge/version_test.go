package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/node"
)

// TestVersionLine: the module version and the VCS revision from the
// build information, "unknown" where the build has none (-buildvcs=false,
// as .ci/run builds).
func TestVersionLine(t *testing.T) {
	plat := " " + runtime.GOOS + "/" + runtime.GOARCH
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "4cb6b26d1e2f4cb6b26d1e2f4cb6b26d1e2f4cb6"},
		{Key: "vcs.time", Value: "2026-12-01T09:30:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"stamped", stamped, true, "edge v0.3.0, revision 4cb6b26d1e2f4cb6b26d1e2f4cb6b26d1e2f4cb6, 2026-12-01T09:30:00Z, modified, go1.26.8" + plat},
		{"buildvcs=false", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "edge (devel), revision unknown, go1.26.8" + plat},
		{"no build info", nil, false, "edge unknown, revision unknown, " + runtime.Version() + plat},
	} {
		if got := versionLine(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionAndHelpOfTheBinary: the real binary's --version is one line
// in versionLine's form, and -h lists every flag and names the commands.
func TestVersionAndHelpOfTheBinary(t *testing.T) {
	bin := buildEdge(t)
	for _, arg := range []string{"--version", "-version", "version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("edge %s: %v\n%s", arg, err, out)
		}
		if !regexp.MustCompile(`^edge \S+, revision (unknown|[0-9a-f]{40})(, \S+)?(, modified)?, go1\.\S+ \S+/\S+\n$`).Match(out) {
			t.Fatalf("edge %s: %q", arg, out)
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-h")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("edge -h: %v\n%s", err, stderr.String())
	}
	help := stderr.String()
	for _, want := range []string{"Usage: edge [flags]", "\n  edge tenants ", "\n  edge nats-authz ", "\n  edge healthcheck ", "\n  edge --version "} {
		if !strings.Contains(help, want) {
			t.Errorf("edge -h does not say %q", want)
		}
	}
	for _, f := range config.Flags() {
		if !strings.Contains(help, "  --"+f+" ") {
			t.Errorf("edge -h does not list --%s", f)
		}
	}
	if t.Failed() {
		t.Log(help)
	}
}

// TestHealthcheck: `edge healthcheck` exits 0 on a ready node's /readyz
// and 1 when nothing answers; without --url it asks $SLUICE_HTTP_ADDR's
// port on this host.
func TestHealthcheck(t *testing.T) {
	n := node.Start(t, testkit.New(t))
	run := func(env map[string]string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runHealthcheck(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run(nil, "--url", n.URL+"/readyz"); code != 0 || !strings.Contains(out, `"status":"ready"`) {
		t.Fatalf("ready node: exit %d: %s", code, out)
	}
	port := strings.TrimPrefix(n.URL, "http://127.0.0.1:")
	if code, out := run(map[string]string{config.EnvName("http-addr"): "0.0.0.0:" + port}); code != 0 {
		t.Fatalf("from $SLUICE_HTTP_ADDR 0.0.0.0:%s: exit %d: %s", port, code, out)
	}
	if code, out := run(nil, "--url", n.URL+"/no-such-path"); code != 1 || !strings.Contains(out, "404") {
		t.Fatalf("a 404: exit %d: %s", code, out)
	}
	if code, out := run(nil, "--url", "http://127.0.0.1:1/readyz"); code != 1 {
		t.Fatalf("nothing listening: exit %d: %s", code, out)
	}
	if code, _ := run(nil, "extra"); code != 2 {
		t.Fatalf("an argument: exit %d, want 2", code)
	}
}

func TestReadyzURL(t *testing.T) {
	for in, want := range map[string]string{
		"": "http://127.0.0.1:8080/readyz", ":9000": "http://127.0.0.1:9000/readyz", "0.0.0.0:80": "http://127.0.0.1:80/readyz",
		"[::]:81": "http://127.0.0.1:81/readyz", "10.0.0.5:8080": "http://10.0.0.5:8080/readyz", "[::1]:8080": "http://[::1]:8080/readyz",
	} {
		if got, err := readyzURL(in); err != nil || got != want {
			t.Errorf("readyzURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := readyzURL("no-port"); err == nil {
		t.Error("readyzURL(no-port): no error")
	}
}
