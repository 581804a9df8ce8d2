package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// tool returns the path of a program a test needs that Go does not bring
// (.ci/run installs it from Debian's packages). Without it the test is
// skipped, saying what to install — except under CI (CI set), where a
// missing tool fails the test: the CI machine must run every check.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (apt-get install %s): CI must run this check", name, pkg)
	}
	t.Skipf("%s is not installed (apt-get install %s; .ci/run does)", name, pkg)
	return ""
}

// output runs the program name with args in dir ("": the test's) and env
// added to the test's environment, and returns what it wrote to stdout and
// to stderr. A failure (it did not start, or exited non-zero) is an error
// with the command line and everything the program wrote.
func output(dir string, env []string, name string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), errb.Bytes(), fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.Bytes(), errb.Bytes())
	}
	return out.Bytes(), errb.Bytes(), nil
}

// run is output failing t on an error; it returns the program's stdout.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	out, _, err := output(dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
