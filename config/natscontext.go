package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// natsContext is the part of a NATS CLI context file (nats context save;
// jsm.go's natscontext) that a client of --nats-url uses.
type natsContext struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	TLSFirst bool   `json:"tls_first"`
}

// contextUnsupported are context fields sluice refuses when set (they
// would change how it reaches JetStream, or need what it does not do).
var contextUnsupported = []string{"socks_proxy", "nsc", "jetstream_domain", "jetstream_api_prefix", "jetstream_event_prefix",
	"inbox_prefix", "user_jwt", "user_seed", "windows_cert_store", "windows_cert_match_by", "windows_cert_match", "windows_ca_certs_match"}

// contextPath is the file of --nats-context: a path, or the name of a
// context the nats CLI saved ($XDG_CONFIG_HOME/nats/context/NAME.json).
func contextPath(v string, getenv func(string) string) string {
	if strings.ContainsRune(v, filepath.Separator) || strings.HasSuffix(v, ".json") {
		return expandHome(v, getenv)
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		dir = filepath.Join(getenv("HOME"), ".config")
	}
	return filepath.Join(dir, "nats", "context", v+".json")
}

// expandHome expands a leading ~/ as the nats CLI does.
func expandHome(p string, getenv func(string) string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(getenv("HOME"), rest)
	}
	return p
}

// loadNATSContext reads --nats-context into c.NATS (and c.NATSURL when
// --nats-url is not given). from says where the flag's value came from.
func (c *Config) loadNATSContext(from string, getenv func(string) string) error {
	if c.NATSContext == "" {
		return nil
	}
	path := contextPath(c.NATSContext, getenv)
	fail := func(err error) error { return fmt.Errorf("config: --nats-context%s: %s: %w", from, path, err) }
	data, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	var ctx natsContext
	var all map[string]any
	if err := json.Unmarshal(data, &all); err != nil {
		return fail(jsonError(data, err))
	}
	if err := json.Unmarshal(data, &ctx); err != nil {
		return fail(jsonError(data, err))
	}
	for _, k := range contextUnsupported {
		if v, ok := all[k]; ok && v != nil && v != "" && v != false {
			if s, isList := v.([]any); !isList || len(s) > 0 {
				return fail(fmt.Errorf("%s: not supported by sluice: remove it", k))
			}
		}
	}
	var methods []string
	for _, m := range []struct{ name, v string }{{"creds", ctx.Creds}, {"nkey", ctx.NKey}, {"user", ctx.User}, {"token", ctx.Token}} {
		if m.v != "" {
			methods = append(methods, m.name)
		}
	}
	switch {
	case len(methods) > 1:
		return fail(fmt.Errorf("%s: choose one authentication method", strings.Join(methods, ", ")))
	case (ctx.Cert == "") != (ctx.Key == ""):
		return fail(errors.New("cert and key: give both or neither"))
	case c.NATSURL == "" && ctx.URL == "":
		return fail(errors.New("no url: add --nats-url"))
	case c.NATSURL != "" && ctx.URL != "" && c.NATSURL != ctx.URL:
		return fail(fmt.Errorf("url %q and --nats-url %q differ: keep one", redactURL(ctx.URL), redactURL(c.NATSURL)))
	}
	if c.NATSURL == "" {
		for u := range strings.SplitSeq(ctx.URL, ",") {
			if err := checkURL(strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				return fail(fmt.Errorf("url: %w", err))
			}
		}
		c.NATSURL = ctx.URL
	}
	home := func(p string) string { return expandHome(p, getenv) }
	c.NATS = NATSAuth{
		Creds: home(ctx.Creds), User: ctx.User, Password: NewSecret(ctx.Password), Token: NewSecret(ctx.Token), NKey: home(ctx.NKey),
		TLSCA: home(ctx.CA), TLSCert: home(ctx.Cert), TLSKey: home(ctx.Key), TLSFirst: ctx.TLSFirst,
	}
	return nil
}

// jsonError names the line of a JSON syntax error.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("line %d: %w", bytes.Count(data[:se.Offset], []byte("\n"))+1, err)
	}
	return err
}
