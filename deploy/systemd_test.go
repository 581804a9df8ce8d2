package deploy

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const unitFile = "systemd/sluice.service"

// unitKeys reads a unit file's [Service] (and other) settings: key -> the
// values of every line that sets it, in order. Commented lines are left out.
func unitKeys(t *testing.T, data []byte) map[string][]string {
	t.Helper()
	keys := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not key=value", unitFile, line)
		}
		keys[k] = append(keys[k], v)
	}
	return keys
}

// TestSystemdUnit: the unit is hardened (a dynamic user, a read-only
// system, its state in StateDirectory as the --data-dir), restarts on
// failure and always after exit 3 (storage that only a restart recovers,
// fx/storage.go storageExitCode) but never after exit 2 (a configuration
// error, cmd/edge), passes only flags the edge has, and is one
// systemd-analyze verify accepts without a warning.
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	keys := unitKeys(t, data)
	want := map[string]string{
		"DynamicUser": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"NoNewPrivileges": "yes", "StateDirectory": "sluice", "Restart": "on-failure",
		"RestartForceExitStatus": "3", "RestartPreventExitStatus": "2", "CapabilityBoundingSet": "",
	}
	for k, v := range want {
		if got := keys[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s=%q, want %s=%s", k, got, k, v)
		}
	}
	exec0 := keys["ExecStart"]
	if len(exec0) != 1 {
		t.Fatalf("ExecStart %q", exec0)
	}
	args := strings.Fields(exec0[0])
	if args[0] != "/usr/local/bin/edge" {
		t.Errorf("ExecStart runs %s", args[0])
	}
	if i := slices.Index(args, "--data-dir"); i < 0 || args[i+1] != "%S/"+keys["StateDirectory"][0] {
		t.Errorf("ExecStart %q: --data-dir is not the StateDirectory (%%S/sluice)", exec0[0])
	}
	// Every flag, in ExecStart and in the drop-in the comments show.
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimLeft(line, "# ")
		if rest, ok := strings.CutPrefix(line, "ExecStart=/usr/local/bin/edge "); ok {
			var flagArgs []any
			fields := strings.Fields(rest)
			for i := 0; i+1 < len(fields); i += 2 {
				flagArgs = append(flagArgs, fields[i]+"="+fields[i+1])
			}
			flags(t, flagArgs)
		}
	}

	analyze := tool(t, "systemd-analyze", "systemd")
	// verify wants the executable to exist: the copy runs this test binary
	// instead (verify never starts it).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(data, []byte("/usr/local/bin/edge"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A warning fails the check too: verify says nothing of a clean unit.
	out, errOut, err := output("", nil, analyze, "verify", unit)
	if err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(out)) > 0 || len(bytes.TrimSpace(errOut)) > 0 {
		t.Fatalf("systemd-analyze verify warns:\n%s%s", out, errOut)
	}
}

// TestAlertRules: promtool checks the rules and runs their unit tests
// (monitoring/sluice-alerts_test.yaml: every alert firing and not on
// synthetic series).
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "sluice-alerts.yaml"},
		{"test", "rules", "sluice-alerts_test.yaml"},
	} {
		run(t, "monitoring", nil, promtool, args...)
	}
}
