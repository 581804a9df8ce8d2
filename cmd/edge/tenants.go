package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/tenants"
)

// Environment of `edge tenants`.
const (
	envAdminURL   = "SLUICE_ADMIN_URL"
	envAdminToken = config.EnvPrefix + "ADMIN_TOKEN" // the node's own --admin-token twin
)

const tenantsUsage = `Usage: edge tenants <command> [names] [flags]

Drives the admin API of a running edge (docs/PROTOCOL.md, "Admin API").
Every command takes --url (default $SLUICE_ADMIN_URL, else
http://127.0.0.1:8080) and --token (default $SLUICE_ADMIN_TOKEN; prefer the
environment: a flag shows in ps). Secrets are read from an environment
variable (--secret-env) or a file (--secret-file), never from the command
line, and are never printed: replies show a fingerprint.

Commands:
  list                                   every tenant, page by page
  get TENANT                             a tenant's record
  add TENANT [--source S --verify SCHEME --secret-env VAR] [source flags]
                                         create a new tenant (and one source)
  set-source TENANT SOURCE [source flags]
                                         create or replace a source
  rotate TENANT SOURCE --secret-env VAR [--overlap 24h]
                                         add a secret; the others stop verifying after --overlap
  retire TENANT SOURCE SECRET_ID         remove a secret at once
  rm TENANT [SOURCE]                     delete a tenant (or one of its sources)
  reseal                                 seal every secret again with the node's current key
                                         (--secrets-key-file rotation)

Source flags: --verify PRESET (github, stripe, slack, …) or --verify-file SCHEME.yaml, --secret-env VAR,
--secret-file PATH, --dedupe SPEC, --event-type SPEC, --max-body-bytes N, --hooks RATE:BURST,
--bytes RATE:BURST. Tenant flags (add): --tenant-hooks RATE:BURST,
--tenant-bytes RATE:BURST. Writes take --revision N (409 if the record
changed since).
`

// tenantsCLI is one invocation of `edge tenants`.
type tenantsCLI struct {
	base, token    string
	stdout, stderr io.Writer
	getenv         func(string) string
	client         *http.Client
}

// runTenants is `edge tenants`.
func runTenants(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd, pos, rest, fs, base, token, code, done := adminArgs("edge tenants", tenantsUsage, args, stderr)
	if done {
		return code
	}
	rev := fs.Uint64("revision", 0, "expected revision (If-Match)")
	src := sourceFlags(fs)
	source := fs.String("source", "", "add: a source to create with the tenant")
	tHooks := fs.String("tenant-hooks", "", "add: the tenant's hooks limit RATE:BURST")
	tBytes := fs.String("tenant-bytes", "", "add: the tenant's bytes limit RATE:BURST")
	overlap := fs.Duration("overlap", 0, "rotate: how long the other secrets keep verifying")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edge tenants %s: unexpected argument %q (names come before flags)\n", cmd, fs.Arg(0))
		return 2
	}
	c := newAdminCLI("edge tenants", *base, *token, getenv, stdout, stderr)
	if c == nil {
		return 2
	}
	want := map[string]int{"list": 0, "get": 1, "add": 1, "set-source": 2, "rotate": 2, "retire": 3, "rm": -1, "reseal": 0}
	n, ok := want[cmd]
	switch {
	case !ok:
		fmt.Fprintf(stderr, "edge tenants: unknown command %q\n%s", cmd, tenantsUsage)
		return 2
	case n >= 0 && len(pos) != n, n < 0 && (len(pos) < 1 || len(pos) > 2):
		fmt.Fprintf(stderr, "edge tenants %s: wrong number of names\n%s", cmd, tenantsUsage)
		return 2
	}
	for _, p := range pos[:min(len(pos), 2)] {
		if !config.ValidName(p) {
			fmt.Fprintf(stderr, "edge tenants %s: invalid name %q\n", cmd, p)
			return 2
		}
	}
	var err error
	switch cmd {
	case "list":
		err = c.list(ctx)
	case "get":
		err = c.call(ctx, "GET", tenantPath(pos[0]), nil, 0)
	case "add":
		err = c.add(ctx, pos[0], *source, *tHooks, *tBytes, src, *rev)
	case "set-source":
		var body map[string]any
		if body, err = src.body(c.getenv); err == nil {
			err = c.call(ctx, "PUT", tenantPath(pos[0], "sources", pos[1]), body, *rev)
		}
	case "rotate":
		err = c.rotate(ctx, pos[0], pos[1], src, *overlap, *rev)
	case "retire":
		err = c.call(ctx, "DELETE", tenantPath(pos[0], "sources", pos[1], "secrets", pos[2]), nil, *rev)
	case "reseal":
		err = c.call(ctx, "POST", "/v1/admin/secrets/reseal", nil, 0)
	case "rm":
		p := tenantPath(pos[0])
		if len(pos) == 2 {
			p = tenantPath(pos[0], "sources", pos[1])
		}
		err = c.call(ctx, "DELETE", p, nil, *rev)
	}
	if err != nil {
		fmt.Fprintln(stderr, "edge tenants "+cmd+":", err)
		return 1
	}
	return 0
}

// adminArgs starts an admin command (`edge tenants`, `edge consumers`):
// help (exit code 0, or 2 without arguments), the command, the names
// before the flags, and a flag set with --url and --token. done is true
// when the caller returns code at once.
func adminArgs(name, usage string, args []string, stderr io.Writer) (cmd string, pos, rest []string, fs *flag.FlagSet, base, token *string, code int, done bool) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return "", nil, nil, nil, nil, nil, 2, true
		}
		return "", nil, nil, nil, nil, nil, 0, true
	}
	cmd, rest = args[0], args[1:]
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	fs = flag.NewFlagSet(name+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	base = fs.String("url", "", "admin API base URL ($"+envAdminURL+")")
	token = fs.String("token", "", "admin token ($"+envAdminToken+")")
	return cmd, pos, rest, fs, base, token, 0, false
}

// newAdminCLI is the admin API client of command (`edge tenants`, `edge
// consumers`): base or $SLUICE_ADMIN_URL or the local default, token or
// $SLUICE_ADMIN_TOKEN; nil (said on stderr) without a token.
func newAdminCLI(command, base, token string, getenv func(string) string, stdout, stderr io.Writer) *tenantsCLI {
	c := &tenantsCLI{base: base, token: token, stdout: stdout, stderr: stderr, getenv: getenv, client: &http.Client{Timeout: 30 * time.Second}}
	if c.base == "" {
		c.base = getenv(envAdminURL)
	}
	if c.base == "" {
		c.base = "http://127.0.0.1:8080"
	}
	c.base = strings.TrimRight(c.base, "/")
	if c.token == "" {
		c.token = getenv(envAdminToken)
	}
	if c.token == "" {
		fmt.Fprintf(stderr, "%s: no admin token: set $%s (or --token)\n", command, envAdminToken)
		return nil
	}
	return c
}

func tenantPath(parts ...string) string {
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/admin/tenants/" + strings.Join(parts, "/")
}

// srcFlags are the flags of a source.
type srcFlags struct {
	verify, verifyFile, secretEnv, secretFile, dedupe, eventType, hooks, bytes *string
	maxBody                                                                    *int64
}

func sourceFlags(fs *flag.FlagSet) *srcFlags {
	return &srcFlags{
		verify:     fs.String("verify", "", "verification preset (github, stripe, standard_webhooks, svix, shopify, slack, twilio, linear, gitlab, api_key, basic)"),
		verifyFile: fs.String("verify-file", "", "a declarative scheme as YAML (what follows verify: in the config file)"),
		secretEnv:  fs.String("secret-env", "", "environment variable holding the secret"),
		secretFile: fs.String("secret-file", "", "file holding the secret (trailing newline dropped)"),
		dedupe:     fs.String("dedupe", "", "dedupe spec (a preset, header:<Name>, json:<path>, none, auto)"),
		eventType:  fs.String("event-type", "", "where the event type is (header:<Name>, json:<path>, or github, gitlab, shopify, stripe, …)"),
		hooks:      fs.String("hooks", "", "the source's own hooks limit RATE:BURST"),
		bytes:      fs.String("bytes", "", "the source's own bytes limit RATE:BURST"),
		maxBody:    fs.Int64("max-body-bytes", 0, "largest body (0: the default)"),
	}
}

// secret reads the secret from --secret-env or --secret-file ("" when
// neither is given).
func (f *srcFlags) secret(getenv func(string) string) (string, error) {
	switch {
	case *f.secretEnv != "" && *f.secretFile != "":
		return "", errors.New("--secret-env and --secret-file are exclusive")
	case *f.secretEnv != "":
		s := getenv(*f.secretEnv)
		if s == "" {
			return "", fmt.Errorf("--secret-env: $%s is not set", *f.secretEnv)
		}
		return s, nil
	case *f.secretFile != "":
		b, err := os.ReadFile(*f.secretFile)
		if err != nil {
			return "", fmt.Errorf("--secret-file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// body is the PUT body of a source.
func (f *srcFlags) body(getenv func(string) string) (map[string]any, error) {
	body := map[string]any{}
	switch {
	case *f.verify != "" && *f.verifyFile != "":
		return nil, errors.New("--verify and --verify-file are exclusive")
	case *f.verify != "":
		body["verify"] = *f.verify
	case *f.verifyFile != "":
		v, err := readVerifyFile(*f.verifyFile)
		if err != nil {
			return nil, err
		}
		body["verify"] = v
	}
	if *f.eventType != "" {
		body["event_type"] = *f.eventType
	}
	if *f.dedupe != "" {
		body["dedupe"] = *f.dedupe
	}
	if *f.maxBody != 0 {
		body["max_body_bytes"] = *f.maxBody
	}
	lim, err := limitsBody(*f.hooks, *f.bytes, "--hooks", "--bytes")
	if err != nil {
		return nil, err
	}
	if lim != nil {
		body["limits"] = lim
	}
	secret, err := f.secret(getenv)
	if err != nil {
		return nil, err
	}
	if secret != "" {
		body["secret"] = secret
	}
	return body, nil
}

// maxVerifyFile bounds a --verify-file.
const maxVerifyFile = 64 << 10

// readVerifyFile reads a declarative scheme as the config file reads
// verify (config.VerifyFields, config.SchemeOf: a wrong field is refused
// here, naming it) and returns it in the record's form.
func readVerifyFile(path string) (tenants.Verify, error) {
	f, err := os.Open(path)
	if err != nil {
		return tenants.Verify{}, fmt.Errorf("--verify-file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxVerifyFile+1))
	if err != nil {
		return tenants.Verify{}, fmt.Errorf("--verify-file: %w", err)
	}
	if len(data) > maxVerifyFile {
		return tenants.Verify{}, fmt.Errorf("--verify-file: larger than %d bytes", maxVerifyFile)
	}
	fields, err := config.VerifyFields(data)
	if err != nil {
		return tenants.Verify{}, fmt.Errorf("--verify-file %s: %w", path, err)
	}
	if _, err := config.SchemeOf(fields); err != nil {
		return tenants.Verify{}, fmt.Errorf("--verify-file %s: %w", path, err)
	}
	return tenants.VerifyOf(fields), nil
}

// limitsBody turns RATE:BURST flags into a limits object (nil: none).
func limitsBody(hooks, bytes, hooksFlag, bytesFlag string) (map[string]any, error) {
	out := map[string]any{}
	for _, l := range []struct{ v, flag, key string }{{hooks, hooksFlag, "hooks"}, {bytes, bytesFlag, "bytes"}} {
		if l.v == "" {
			continue
		}
		var r config.Rate
		rs, bs, ok := strings.Cut(l.v, ":")
		if _, err := fmt.Sscan(rs, &r.Rate); err != nil || !ok {
			return nil, fmt.Errorf("%s: want RATE:BURST, e.g. 100:200", l.flag)
		}
		if _, err := fmt.Sscan(bs, &r.Burst); err != nil {
			return nil, fmt.Errorf("%s: want RATE:BURST, e.g. 100:200", l.flag)
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		out[l.key] = r
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func (c *tenantsCLI) add(ctx context.Context, tenant, source, hooks, bytes string, src *srcFlags, rev uint64) error {
	body := map[string]any{}
	lim, err := limitsBody(hooks, bytes, "--tenant-hooks", "--tenant-bytes")
	if err != nil {
		return err
	}
	if lim != nil {
		body["limits"] = lim
	}
	sbody, err := src.body(c.getenv)
	if err != nil {
		return err
	}
	if source == "" && len(sbody) > 0 {
		return errors.New("source flags need --source")
	}
	if source != "" && !config.ValidName(source) {
		return fmt.Errorf("--source: invalid name %q", source)
	}
	if source != "" {
		// One write: the tenant and its source exist together or not at all.
		body["sources"] = map[string]any{source: sbody}
	}
	return c.call(ctx, "PUT", tenantPath(tenant), body, rev, "If-None-Match", "*")
}

func (c *tenantsCLI) rotate(ctx context.Context, tenant, source string, src *srcFlags, overlap time.Duration, rev uint64) error {
	secret, err := src.secret(c.getenv)
	if err != nil {
		return err
	}
	if secret == "" {
		return errors.New("give the new secret with --secret-env or --secret-file")
	}
	return c.call(ctx, "POST", tenantPath(tenant, "sources", source, "secrets"),
		map[string]any{"secret": secret, "retire_others_after": overlap.String()}, rev)
}

// list prints every tenant, following the pages.
func (c *tenantsCLI) list(ctx context.Context) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tMANAGED\tREVISION\tSOURCES")
	after := ""
	for {
		var page struct {
			Tenants []struct {
				Name, Managed string
				Revision      uint64
				Sources       []string
			}
			Next string
		}
		data, err := c.do(ctx, "GET", "/v1/admin/tenants?limit=1000&after="+url.QueryEscape(after), nil, 0)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return err
		}
		for _, t := range page.Tenants {
			rev := "-"
			if t.Revision > 0 {
				rev = fmt.Sprint(t.Revision)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Managed, rev, strings.Join(t.Sources, ","))
		}
		if page.Next == "" {
			return tw.Flush()
		}
		after = page.Next
	}
}

// call sends a request and prints the reply (indented JSON).
func (c *tenantsCLI) call(ctx context.Context, method, path string, body any, rev uint64, hdr ...string) error {
	data, err := c.do(ctx, method, path, body, rev, hdr...)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if json.Indent(&out, data, "", "  ") != nil {
		out.Reset()
		out.Write(data)
	}
	_, err = c.stdout.Write(out.Bytes())
	return err
}

// do sends a request (hdr: more header name, value pairs); a non-2xx reply
// is an error carrying the reply.
func (c *tenantsCLI) do(ctx context.Context, method, path string, body any, rev uint64, hdr ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	if rev > 0 {
		req.Header.Set("If-Match", fmt.Sprintf("%q", fmt.Sprint(rev)))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		hint := ""
		var e struct{ Error string }
		if res.StatusCode == http.StatusNotFound && json.Unmarshal(data, &e) == nil && e.Error == "not_found" {
			// Not tenant_not_found: the node has no admin API at all.
			hint = "\nhint: " + c.base + " serves no admin API: start the node with --admin-token (or $" + envAdminToken + "), or check --url/$" + envAdminURL
		}
		return nil, fmt.Errorf("%s %s: %s: %s%s", method, path, res.Status, strings.TrimSpace(string(data)), hint)
	}
	return data, nil
}
