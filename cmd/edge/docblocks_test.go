package main

import (
	"context"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// A command block of the docs: a fenced ```sh, ```bash or ```shell block
// of README.md or docs/*.md. Output blocks (```http, ```json, ``` alone)
// are not commands.
type docCmdBlock struct {
	file    string // from the repository's root: README.md, docs/X.md
	line    int    // of the opening fence, 1-based
	heading string // the nearest heading above it, "## Quickstart"; "## Quickstart (2)" for its second block
	body    string // its lines, each ending in "\n"
	skip    string // the reason of a <!-- doc-test: skip — reason --> marker
	runBy   string // the test of a <!-- doc-test: run by TestX --> marker
}

func (b docCmdBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var (
	docFenceRe  = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^\\s`]*)")
	docMarkerRe = regexp.MustCompile(`^<!--\s*doc-test:\s*(.*?)\s*-->\s*$`)
	docSkipRe   = regexp.MustCompile(`^skip\s*[—:–-]\s*(\S.*)$`)
	docRunByRe  = regexp.MustCompile(`^run by (Test\w+)$`)
)

// docCommandBlocks returns every command block of README.md, CONTRIBUTING.md and
// docs/*.md under root with its marker, and the errors of malformed or
// stray markers (a marker belongs right above a command block: the last
// non-blank line before its fence).
func docCommandBlocks(root string) ([]docCmdBlock, []string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	files = append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md")}, files...)
	var blocks []docCmdBlock
	var errs []string
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		lines := strings.Split(string(data), "\n")
		heading, marker, markerLine, nth := "", "", 0, 0
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			if m := docMarkerRe.FindStringSubmatch(l); m != nil {
				if marker != "" {
					errs = append(errs, fmt.Sprintf("%s:%d: doc-test marker not followed by a command block", rel, markerLine))
				}
				marker, markerLine = m[1], i+1
				continue
			}
			if strings.HasPrefix(l, "#") {
				heading, nth = l, 0
			}
			f := docFenceRe.FindStringSubmatch(l)
			if f == nil {
				if strings.TrimSpace(l) != "" && marker != "" {
					errs = append(errs, fmt.Sprintf("%s:%d: doc-test marker not followed by a command block", rel, markerLine))
					marker = ""
				}
				continue
			}
			start, fence, lang := i, f[1], f[2]
			var body strings.Builder
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimLeft(lines[i], " "), fence); i++ {
				body.WriteString(lines[i] + "\n")
			}
			switch lang {
			case "sh", "bash", "shell":
			default:
				if marker != "" {
					errs = append(errs, fmt.Sprintf("%s:%d: doc-test marker above a %q block, not a command block", rel, markerLine, lang))
					marker = ""
				}
				continue
			}
			nth++
			b := docCmdBlock{file: rel, line: start + 1, heading: heading, body: body.String()}
			if nth > 1 {
				b.heading = fmt.Sprintf("%s (%d)", heading, nth)
			}
			if marker != "" {
				if m := docSkipRe.FindStringSubmatch(marker); m != nil {
					b.skip = m[1]
				} else if m := docRunByRe.FindStringSubmatch(marker); m != nil {
					b.runBy = m[1]
				} else {
					errs = append(errs, fmt.Sprintf("%s:%d: doc-test marker %q: want \"skip — <reason>\" or \"run by TestX\"", rel, markerLine, marker))
				}
				marker = ""
			}
			blocks = append(blocks, b)
		}
	}
	return blocks, errs, nil
}

// docPage is what a page's blocks need besides the binary: a node of the
// test started before them (for pages whose blocks talk to a running node
// without starting one), and what the test checks in each block's output,
// by the block's heading.
type docPage struct {
	node   bool
	expect map[string][]string
	// natsExpect: the same for answers of nats commands, checked only with
	// the nats CLI installed.
	natsExpect map[string][]string
	// again names blocks whose last command the reader runs once more,
	// as the page says next ("The same delivery again is a duplicate"),
	// with what that second answer must contain.
	again map[string][]string
	// natsOnly: the page's blocks need the nats CLI (without it the page
	// is skipped, not run half).
	natsOnly bool
	// natsFailOnce: a nats command whose arguments match this shell
	// pattern fails its first time, cut off after 0.15 s, so that the
	// page's retry of it runs in every run, not only when the failure it
	// is for comes by itself.
	natsFailOnce string
}

// failedOnPurpose marks a nats command natsFailOnce failed.
const failedOnPurpose = "nats: error: failed on purpose by the doc test"

var docPages = map[string]docPage{
	// The cluster's restore is tried again when nats-server drops its
	// first chunk ("no responders", about one run of the page in ten):
	// HOOKS' first restore fails on purpose.
	"docs/BACKUP.md": {natsFailOnce: `*" backup restore stream "*"/cbackup/HOOKS "*`},
	"README.md": {
		expect: map[string][]string{"## Quickstart": {"HTTP/1.1 202", `{"status":"accepted","id":"`}},
		again:  map[string][]string{"## Quickstart": {`"status":"duplicate"`, `"duplicate":true`}},
	},
	"docs/CLIENTS.md": {node: true, natsExpect: map[string][]string{"# The NATS protocol, from any language": {
		`"result":"ok"`, `"granted":true`, `{"result":"claimed"}`, `"backend":"anthropic"`, "sluice_claims",
	}}},
	"docs/DEPLOY.md": {
		expect: map[string][]string{"## The binary": {"edge ", "tenants", "healthcheck"}},
	},
	// The production procedure under the roles (issue 42): each reader
	// refused the other tenant's deliveries and dead letters, the operator
	// JetStream's API; two dead letters, one redriven; the metrics.
	"docs/CONSUMING.md": {natsOnly: true, natsExpect: map[string][]string{
		consumingRoles + " (3)": {
			`Permissions Violation for Subscription to "sluice.redeliver.globex.consumer.worker"`,
			`Permissions Violation for Subscription to "sluice.redeliver.acme.consumer.gh-worker"`,
			`Permissions Violation for Publish to "$JS.API.`, "refused",
		},
		consumingRoles + " (4)": {
			"Sluice-Dead-Reason: max_deliver", "Sluice-Dead-Reason: terminated",
			`Permissions Violation for Publish to "$JS.API.CONSUMER.INFO.DEADLETTER.acme"`, "refused",
			`"reason": "max_deliver"`, `"reason": "terminated"`, `"redriven"`, "Sluice-Redrive-Of: ",
		},
		consumingRoles + " (5)": {
			`sluice_dead_letters_total{reason="max_deliver"} 1`, `sluice_dead_letters_total{reason="terminated"} 1`,
			`sluice_consumer_dead_letters{consumer="audit",tenant="acme"} 1`,
			`sluice_consumer_ack_pending{consumer="audit",tenant="acme"} 0`,
			`sluice_consumer_ack_pending{consumer="worker",tenant="globex"} 0`,
			`sluice_consumer_pending{consumer="worker",tenant="globex"} 0`,
		},
		consumingRoles + " (6)": {
			`"Sluice-Dead-Reason":["terminated"]`, `"body":"`, `"reason": "terminated"`, `"dead_letters": []`,
			`"consumer": "nosuch"`,
		},
		consumingRoles + " (7)": {
			"put -h: exit 0", "consumer_not_found", "get of a deleted consumer: exit 1", "an invalid name: exit 2",
		},
	}},
}

// consumingRoles is the heading of CONSUMING.md's production procedure.
const consumingRoles = "## Managed consumers (the production procedure)"

// The ports the docs use (a three-node cluster on one machine: 8080–8082,
// 4222–4224, 6222–6224), each replaced by a free one (the same within a
// page); /tmp/ becomes the page's directory. Nothing else of a block
// changes, except that its `go build -o X ./cmd/edge` copies the binary
// the test built once, and a comment line "# wait for …" (an instruction
// to the reader) waits until the node on the page's 8080 is ready.
var docPorts = []string{"8080", "8081", "8082", "4222", "4223", "4224", "6222", "6223", "6224", "7422", "8222"}

var (
	docBuildRe  = regexp.MustCompile(`\bgo build -o (\S+) \./cmd/edge\b`)
	docWaitRe   = regexp.MustCompile(`(?m)^# wait for .*$`)
	docAnswerRe = regexp.MustCompile(`^#\s+->\s+(?:\d{3}\s+)?(\{.*\}|\[.*\])\s*$`)
)

// TestDocBlocks runs every command block of README.md and docs/*.md that
// carries no marker, as a reader pastes it: the blocks of one page in order
// in one bash (set -eu) in one temporary directory, with the ports, /tmp
// paths and the binary's build substituted as docPorts says, `edge` and
// (when installed) `nats` on the PATH (a live `nats sub` stopped after
// 2 s), NATS_URL and the edge's SLUICE_HTTP_ADDR/SLUICE_NATS_LISTEN
// defaults pointing at the page's ports, and for the pages docPages says a
// node of the test started first. A failing command fails the test with its
// file:line, and so does an answer a block promises in a comment
// ("#   -> 202 {…}", "…" any text) missing from its output (in order), or
// one docPages expects. A block that cannot run here carries
// <!-- doc-test: skip — reason --> right above it; one a dedicated test
// runs, <!-- doc-test: run by TestX -->, and TestX must exist and name the
// block's heading. A malformed or stray marker fails the test.
func TestDocBlocks(t *testing.T) {
	root := filepath.Join("..", "..")
	blocks, errs, err := docCommandBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
	tests := docTestNames(t, root)
	pages := map[string][]docCmdBlock{}
	var order []string
	for _, b := range blocks {
		switch {
		case b.skip != "":
			t.Logf("%s: skipped: %s", b.where(), b.skip)
		case b.runBy != "":
			src, ok := tests[b.runBy]
			heading, _, _ := strings.Cut(b.heading, " (")
			switch {
			case !ok:
				t.Errorf("%s: marked run by %s, but no test has that name", b.where(), b.runBy)
			case !strings.Contains(src, strconv.Quote(heading)):
				t.Errorf("%s: marked run by %s, which does not name its heading %q", b.where(), b.runBy, heading)
			}
		default:
			if pages[b.file] == nil {
				order = append(order, b.file)
			}
			pages[b.file] = append(pages[b.file], b)
		}
	}
	if len(order) == 0 {
		return
	}
	bin := buildEdge(t)
	nats := docNatsCLI()
	if nats == "" && os.Getenv("CI") != "" {
		t.Errorf("the nats CLI is not installed (.ci/run installs it): the docs' nats commands would not run")
	} else if nats == "" {
		t.Logf("the nats CLI is not installed (go install github.com/nats-io/natscli/nats@%s): the docs' nats commands only say they were skipped", "v0.5.1")
	}
	for _, file := range order {
		t.Run(file, func(t *testing.T) {
			if docPages[file].natsOnly && nats == "" {
				t.Skip("the page's blocks need the nats CLI")
			}
			runDocPage(t, file, pages[file], docPages[file], bin, nats)
		})
	}
}

// docNatsCLI returns the nats CLI's path: on the PATH, or where
// `go install github.com/nats-io/natscli/nats@…` put it; "" if neither.
func docNatsCLI() string {
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	gobin := os.Getenv("GOBIN")
	if gobin == "" {
		gobin = filepath.Join(build.Default.GOPATH, "bin")
	}
	if p := filepath.Join(gobin, "nats"); exec.Command(p, "--version").Run() == nil {
		return p
	}
	return ""
}

// docTestNames returns the repository's Test functions, each with its
// source (from its line to the closing brace at the start of a line).
func docTestNames(t *testing.T, root string) map[string]string {
	names := map[string]string{}
	re := regexp.MustCompile(`(?ms)^func (Test\w+)\(.*?^}$`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllStringSubmatch(string(data), -1) {
				names[m[1]] = m[0]
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func runDocPage(t *testing.T, file string, blocks []docCmdBlock, page docPage, bin, nats string) {
	dir := t.TempDir()
	binDir := filepath.Join(dir, ".bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binDir, "edge"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	for _, p := range docPorts {
		ports[p] = fmt.Sprint(testkit.FreePort(t))
	}
	subst := func(s string) string {
		for _, p := range docPorts {
			s = regexp.MustCompile(`\b`+p+`\b`).ReplaceAllString(s, ports[p])
		}
		s = strings.ReplaceAll(s, "/tmp/", dir+"/")
		s = docBuildRe.ReplaceAllString(s, `cp "$$DOC_EDGE" ${1}`)
		return docWaitRe.ReplaceAllString(s, `doc_wait_ready # (the reader waits)`)
	}

	// The script: a prelude, then each block after a line that marks where
	// its output starts; lines maps the script's lines back to the docs'.
	var script strings.Builder
	var lines []string // lines[i]: the doc's file:line of the script's line i+1, or ""
	add := func(s, where string, first int) {
		for i, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			script.WriteString(l + "\n")
			if where != "" {
				lines = append(lines, fmt.Sprintf("%s:%d", where, first+i))
			} else {
				lines = append(lines, "")
			}
		}
	}
	add(`set -Eeu
trap 'doc_rc=$?; echo "@@failed: lines $LINENO ${BASH_LINENO[*]}, exit $doc_rc" >&2' ERR
doc_wait_ready() {
  for _ in $(seq 150); do
    curl -sf -o /dev/null localhost:`+ports["8080"]+`/readyz && return 0
    [ -n "$(jobs -rp)" ] || { echo "no node is running: it exited" >&2; return 1; }
    sleep 0.2
  done
  echo "the node on localhost:`+ports["8080"]+` never became ready" >&2; return 1
}`, "", 0)
	if nats == "" {
		add(`nats() { echo "(nats CLI not installed: skipped nats $*)"; }`, "", 0)
	} else {
		// A live subscription runs until the reader stops it: here, 2 s;
		// one that stops itself (--count, --wait) is only bounded.
		cases := `    *" sub "*" --count "*|*" sub "*" --wait "*) timeout 60 "$DOC_NATS" "$@";;
    *" sub "*) timeout 2 "$DOC_NATS" "$@" || [ $? = 124 ];;
    *) "$DOC_NATS" "$@";;`
		if page.natsFailOnce != "" {
			cases = "    " + page.natsFailOnce + `) if [ ! -e "$PWD/.nats-failed" ]; then
      touch "$PWD/.nats-failed"; timeout 0.15 "$DOC_NATS" "$@"; echo '` + failedOnPurpose + `'; return 1
    fi; "$DOC_NATS" "$@";;
` + cases
		}
		add("nats() {\n  case \" $* \" in\n"+cases+"\n  esac\n}", "", 0)
	}
	if page.node {
		// The node is the test's, not a block's: its store budget is 2 s, not
		// 250 ms, as on a loaded 2-core machine under -race the first
		// replay claim took longer (503 store_unavailable, 1 run in 15).
		add(`edge --data-dir "$PWD/.node" --store-timeout 2s >"$PWD/.node.log" 2>&1 &
doc_wait_ready`, "", 0)
	}
	for _, b := range blocks {
		add("echo '@@block "+b.where()+"'", "", 0)
		add(subst(b.body), b.file, b.line+1)
		if want := page.again[b.heading]; want != nil {
			add("echo '@@again "+b.where()+"'", "", 0)
			add(subst(lastCommand(b.body)), b.file, b.line+1)
		}
	}

	env := []string{
		"PATH=" + binDir + ":" + os.Getenv("PATH"), "HOME=" + dir, "DOC_EDGE=" + bin,
		"SLUICE_HTTP_ADDR=127.0.0.1:" + ports["8080"], "SLUICE_NATS_LISTEN=127.0.0.1:" + ports["4222"],
		"NATS_URL=nats://127.0.0.1:" + ports["4222"], "DOC_NATS=" + nats,
		// The nats CLI's contexts: the page's own (it finds its config
		// dir by XDG_CONFIG_HOME or the user's home, not HOME).
		"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"),
	}
	if nats != "" {
		if err := os.Symlink(nats, filepath.Join(binDir, "nats")); err != nil {
			t.Fatal(err)
		}
	}
	stdout, err := runDocScript(t, dir, script.String(), env)
	if err != nil {
		failed := ""
		// The trap's lines: where it failed, then (in a function of the
		// prelude) where that was called; the first in a block is the doc's.
		if m := regexp.MustCompile(`@@failed: lines ([\d ]+),`).FindStringSubmatch(stdout); m != nil {
			for _, f := range strings.Fields(m[1]) {
				var n int
				fmt.Sscan(f, &n)
				if n >= 1 && n <= len(lines) && lines[n-1] != "" {
					failed = " at " + lines[n-1]
					break
				}
			}
		}
		// The last lines first: a CI report that keeps only the start of a
		// long message still shows what the failing command said.
		t.Fatalf("a command of %s failed%s: %v\nits last lines:\n%s\noutput:\n%s%s", file, failed, err, lastLines(stdout, 12), docTail(stdout), docLogs(dir))
	}

	if page.natsFailOnce != "" && nats != "" && !strings.Contains(stdout, failedOnPurpose) {
		t.Errorf("%s: no nats command matched %s, to fail on purpose", file, page.natsFailOnce)
	}
	outs := splitDocOutput(stdout)
	for _, b := range blocks {
		out := outs["@@block "+b.where()]
		want := page.expect[b.heading]
		if nats != "" {
			want = append(want[:len(want):len(want)], page.natsExpect[b.heading]...)
		}
		for _, want := range want {
			if !strings.Contains(out, want) {
				t.Errorf("%s (%s): the output lacks %s\noutput:\n%s", b.where(), b.heading, want, docTail(out))
			}
		}
		if err := docAnswersIn(b.body, out, nats != ""); err != nil {
			t.Errorf("%s (%s): %v\noutput:\n%s", b.where(), b.heading, err, docTail(out))
		}
		if want := page.again[b.heading]; want != nil {
			again := outs["@@again "+b.where()]
			for _, w := range want {
				if !strings.Contains(again, w) {
					t.Errorf("%s (%s): run again, the output lacks %s\noutput:\n%s", b.where(), b.heading, w, docTail(again))
				}
			}
			// The duplicate names the first answer's id.
			if m := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(out); m != nil && !strings.Contains(again, m[0]) {
				t.Errorf("%s (%s): run again, the answer does not carry the first one's id %s:\n%s", b.where(), b.heading, m[1], again)
			}
		}
	}
}

// lastCommand returns a block's last command: its last line that is not a
// comment and continues no line before, with the lines it continues into.
func lastCommand(body string) string {
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if i > 0 && strings.HasSuffix(strings.TrimRight(lines[i-1], " "), "\\") {
			continue
		}
		start = i
	}
	if start < 0 {
		return ""
	}
	end := start
	for end+1 < len(lines) && strings.HasSuffix(strings.TrimRight(lines[end], " "), "\\") {
		end++
	}
	return strings.Join(lines[start:end+1], "\n") + "\n"
}

// docAnswersIn checks that each answer a block promises in a comment
// ("#   -> 200 {"status":"duplicate","id":"…"}") is in out, in order,
// "…" standing for any text — but for the answers of nats commands
// without the nats CLI (withNats false).
func docAnswersIn(body, out string, withNats bool) error {
	at, last := 0, ""
	for _, l := range strings.Split(body, "\n") {
		m := docAnswerRe.FindStringSubmatch(l)
		if m == nil {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				last = t
			}
			continue
		}
		if !withNats && strings.HasPrefix(last, "nats ") {
			continue
		}
		parts := strings.Split(m[1], "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile(strings.Join(parts, `[^\n]*?`))
		loc := re.FindStringIndex(out[at:])
		if loc == nil {
			return fmt.Errorf("the output lacks the promised answer %s (after what came before it)", m[1])
		}
		at += loc[1]
	}
	return nil
}

// splitDocOutput splits a page's stdout at the "@@block"/"@@again" lines.
func splitDocOutput(stdout string) map[string]string {
	outs := map[string]string{}
	key := ""
	for _, l := range strings.SplitAfter(stdout, "\n") {
		if strings.HasPrefix(l, "@@block ") || strings.HasPrefix(l, "@@again ") {
			key = strings.TrimSpace(l)
			continue
		}
		outs[key] += l
	}
	return outs
}

// runDocScript runs script with bash in dir, its stdout and stderr in one
// file as a terminal shows them (a node a block leaves in the background
// keeps it open), and then stops whatever the script left running:
// SIGTERM to its process group, SIGKILL after 10 s.
func runDocScript(t *testing.T, dir, script string, env []string) (string, error) {
	t.Helper()
	outF, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer outF.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = outF, outF
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	if cmd.Process != nil {
		pg := -cmd.Process.Pid
		_ = syscall.Kill(pg, syscall.SIGTERM)
		start := time.Now()
		for syscall.Kill(pg, 0) == nil && time.Since(start) < 12*time.Second {
			if time.Since(start) > 10*time.Second {
				_ = syscall.Kill(pg, syscall.SIGKILL)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	out, _ := os.ReadFile(outF.Name())
	return string(out), runErr
}

// docTail returns the last 8000 bytes of s, for a failure's message.
// docLogs is the end of each log file a page's commands wrote in dir
// (its /tmp: the nodes a block starts in the background log there), for
// a failed page.
func docLogs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s, last lines:\n%s\n", filepath.Base(f), lastLines(string(data), 25))
	}
	return b.String()
}

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func docTail(s string) string {
	if len(s) > 8000 {
		return "…" + s[len(s)-8000:]
	}
	return s
}

// TestDocCommandBlocksMarkers: docCommandBlocks finds sh and bash blocks
// (not output blocks), reads the marker right above one, and reports a
// marker without a reason, of another form, or above no command block.
func TestDocCommandBlocksMarkers(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	readme := "# r\n\n```sh\necho run\n```\n\n```\nan output\n```\n\n" +
		"<!-- doc-test: skip — three machines -->\n```bash\necho skipped\n```\n" +
		"## H\n<!-- doc-test: run by TestX -->\n\n```sh\necho a\n```\n\n```sh\necho b\n```\n"
	page := "<!-- doc-test: skip -->\n```sh\necho x\n```\n" +
		"<!-- doc-test: later -->\n```sh\necho y\n```\n" +
		"<!-- doc-test: skip — stray -->\ntext\n" +
		"<!-- doc-test: skip — above json -->\n```json\n{}\n```\n"
	for name, s := range map[string]string{"README.md": readme, "CONTRIBUTING.md": "# c\n", "docs/P.md": page} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	blocks, errs, err := docCommandBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		got = append(got, fmt.Sprintf("%s %s skip=%q by=%q", b.where(), b.heading, b.skip, b.runBy))
	}
	want := []string{
		`README.md:3 # r skip="" by=""`,
		`README.md:12 # r (2) skip="three machines" by=""`,
		`README.md:18 ## H skip="" by="TestX"`,
		`README.md:22 ## H (2) skip="" by=""`,
		`docs/P.md:2  skip="" by=""`,
		`docs/P.md:6  (2) skip="" by=""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantErrs := []string{
		`docs/P.md:1: doc-test marker "skip": want "skip — <reason>" or "run by TestX"`,
		`docs/P.md:5: doc-test marker "later": want "skip — <reason>" or "run by TestX"`,
		`docs/P.md:9: doc-test marker not followed by a command block`,
		`docs/P.md:11: doc-test marker above a "json" block, not a command block`,
	}
	if strings.Join(errs, "\n") != strings.Join(wantErrs, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(wantErrs, "\n"))
	}
}
