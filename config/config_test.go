package config_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/testkit"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes a YAML file into a temp dir and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	return testkit.WriteTemp(t, "edge.yaml", []byte(body))
}

func mustLoad(t *testing.T, args []string, getenv func(string) string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(args, getenv, nil)
	if err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	return cfg
}

// TestDefaults: with no flags, environment or file every setting has
// PROTOCOL.md's default.
func TestDefaults(t *testing.T) {
	cfg := mustLoad(t, nil, nil)
	want := &config.Config{
		HTTPAddr:         "127.0.0.1:8080",
		DataDir:          "./data",
		NATSListen:       "127.0.0.1:4222",
		Prefix:           "sluice",
		Partitions:       64,
		Shards:           1,
		Replicas:         1,
		ReplayCapacity:   1000000,
		StoreTimeout:     250 * time.Millisecond,
		PendingTTL:       30 * time.Second,
		DedupeTTL:        72 * time.Hour,
		HooksStream:      "HOOKS",
		HooksMaxAge:      168 * time.Hour,
		ClaimsPersist:    "sync",
		Durability:       "synced",
		LogLevel:         slog.LevelInfo,
		LogFormat:        "text",
		HTTPMaxConns:     4096,
		MaxInFlightHooks: 512,
		ClientIPHeader:   "X-Forwarded-For",
		HubDomain:        "hub",
		SplitShare:       1,
		AllowUnknown:     true,
		OpenQuickstart:   true,
		Defaults: config.Defaults{
			Limits: config.Limits{
				Hooks: config.Rate{Rate: 100, Burst: 200},
				Bytes: config.Rate{Rate: 10485760, Burst: 20971520},
			},
			Source: config.SourceDefaults{MaxBodyBytes: 1048576},
		},
		Tenants: map[string]config.Tenant{},
	}
	if cfg.Defaults.Source.Dedupe.String() != "auto" {
		t.Errorf("default dedupe = %s", cfg.Defaults.Source.Dedupe)
	}
	cfg.Defaults.Source.Dedupe = want.Defaults.Source.Dedupe
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg, want)
	}
	if cfg.AdminToken.IsSet() || cfg.NATS.Password.IsSet() || cfg.NATS.Token.IsSet() {
		t.Error("a secret is set by default")
	}
}

// TestPrecedence: flag > environment > file > default, per field.
func TestPrecedence(t *testing.T) {
	type layer struct{ file, env, flag string }
	cases := []struct {
		flag  string
		vals  layer // "" = layer absent
		get   func(*config.Config) any
		want  any
		label string
	}{
		{"http-addr", layer{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, func(c *config.Config) any { return c.HTTPAddr }, "127.0.0.1:3", "all"},
		{"http-addr", layer{"127.0.0.1:1", "127.0.0.1:2", ""}, func(c *config.Config) any { return c.HTTPAddr }, "127.0.0.1:2", "env over file"},
		{"http-addr", layer{"127.0.0.1:1", "", ""}, func(c *config.Config) any { return c.HTTPAddr }, "127.0.0.1:1", "file over default"},
		{"http-addr", layer{"", "", ""}, func(c *config.Config) any { return c.HTTPAddr }, "127.0.0.1:8080", "default"},
		{"http-addr", layer{"127.0.0.1:1", "", "127.0.0.1:3"}, func(c *config.Config) any { return c.HTTPAddr }, "127.0.0.1:3", "flag over file"},
		{"partitions", layer{"8", "16", "32"}, func(c *config.Config) any { return c.Partitions }, 32, "all"},
		{"partitions", layer{"8", "16", ""}, func(c *config.Config) any { return c.Partitions }, 16, "env over file"},
		{"partitions", layer{"8", "", ""}, func(c *config.Config) any { return c.Partitions }, 8, "file"},
		{"partitions", layer{"8/2", "", "12/3"}, func(c *config.Config) any { return [2]int{c.Partitions, c.Shards} }, [2]int{12, 3}, "shards"},
		{"partitions", layer{"8/2", "", "12"}, func(c *config.Config) any { return [2]int{c.Partitions, c.Shards} }, [2]int{12, 1}, "no shards"},
		{"store-timeout", layer{"1s", "2s", "3s"}, func(c *config.Config) any { return c.StoreTimeout }, 3 * time.Second, "all"},
		{"store-timeout", layer{"1s", "2s", ""}, func(c *config.Config) any { return c.StoreTimeout }, 2 * time.Second, "env"},
		{"store-timeout", layer{"1s", "", ""}, func(c *config.Config) any { return c.StoreTimeout }, time.Second, "file"},
		{"log-level", layer{"warn", "error", "debug"}, func(c *config.Config) any { return c.LogLevel }, slog.LevelDebug, "all"},
		{"log-level", layer{"warn", "", ""}, func(c *config.Config) any { return c.LogLevel }, slog.LevelWarn, "file"},
		{"nats-listen", layer{"off", "", ""}, func(c *config.Config) any { return c.NATSListen }, "", "file off"},
		{"nats-listen", layer{"off", "127.0.0.1:5", ""}, func(c *config.Config) any { return c.NATSListen }, "127.0.0.1:5", "env over file off"},
		{"nats-listen", layer{"", "", "off"}, func(c *config.Config) any { return c.NATSListen }, "", "flag off"},
		{"prefix", layer{"a", "b.c", ""}, func(c *config.Config) any { return c.Prefix }, "b.c", "env"},
		{"admin-token", layer{tokF, tokE, tokX}, func(c *config.Config) any { return c.AdminToken.Reveal() }, tokX, "secret flag"},
		{"admin-token", layer{tokF, tokE, ""}, func(c *config.Config) any { return c.AdminToken.Reveal() }, tokE, "secret env"},
		{"admin-token", layer{tokF, "", ""}, func(c *config.Config) any { return c.AdminToken.Reveal() }, tokF, "secret file"},
		{"dedupe-ttl", layer{"1h", "", "2h"}, func(c *config.Config) any { return c.DedupeTTL }, 2 * time.Hour, "flag over file"},
	}
	for _, tc := range cases {
		t.Run(tc.flag+"/"+tc.label, func(t *testing.T) {
			var args []string
			e := map[string]string{}
			if tc.vals.file != "" {
				args = append(args, "--config", writeFile(t, config.FileKey(tc.flag)+": "+tc.vals.file+"\n"))
			}
			if tc.vals.env != "" {
				e[config.EnvName(tc.flag)] = tc.vals.env
			}
			if tc.vals.flag != "" {
				args = append(args, "--"+tc.flag+"="+tc.vals.flag)
			}
			cfg := mustLoad(t, args, env(e))
			if got := tc.get(cfg); got != tc.want {
				t.Fatalf("%s = %v; want %v", tc.flag, got, tc.want)
			}
		})
	}
}

// TestConfigFromEnv: SLUICE_CONFIG names the file; --config wins over it.
func TestConfigFromEnv(t *testing.T) {
	a := writeFile(t, "partitions: 2\n")
	b := writeFile(t, "partitions: 3\n")
	if cfg := mustLoad(t, nil, env(map[string]string{"SLUICE_CONFIG": a})); cfg.Partitions != 2 || cfg.File != a {
		t.Fatalf("SLUICE_CONFIG: partitions %d, file %q", cfg.Partitions, cfg.File)
	}
	if cfg := mustLoad(t, []string{"-config", b}, env(map[string]string{"SLUICE_CONFIG": a})); cfg.Partitions != 3 {
		t.Fatalf("--config over SLUICE_CONFIG: partitions %d", cfg.Partitions)
	}
}

// TestEveryFlagHasTwins: every flag is settable by flag, environment and
// file, with the same effect.
func TestEveryFlagHasTwins(t *testing.T) {
	natsCtx := writeFile(t, `{"creds": "x.creds", "ca": "ca.pem", "cert": "nc.pem", "key": "nk.pem"}`)
	sample := map[string]string{
		"http-addr": "127.0.0.9:9", "http-advertise": "edge-1.example:8080", "max-inflight-hooks": "9", "tls-cert": "c.pem", "tls-key": "k.pem", "data-dir": "/d",
		"nats-listen": "off", "nats-url": "nats://n:4222", "nats-context": natsCtx, "cluster-listen": "", "routes": "", "prefix": "p.q",
		"partitions": "7", "replicas": "3", "admin-token": tokX, "replay-capacity": "5",
		"store-timeout": "1s", "pending-ttl": "5s", "dedupe-ttl": "1h", "log-level": "debug", "log-format": "json", "access-log": "true",
		"hooks-max-age": "2h", "hooks-max-bytes": "1000", "secrets-key-file": "keys",
		"claim-expiry-events": "true", "claims-persist": "sync", "durability": "acked", "accept-data-loss": "true",
		"trusted-proxies": "10.0.0.0/8, 192.168.1.1", "client-ip-header": "X-Real-IP",
		// The embedded server's file, hub and leaf flags: TestNATSConfig*,
		// TestLeafConfig.
		"nats-config": "", "leaf-listen": "", "hub-url": "", "leaf-name": "", "split-share": "1",
	}
	for _, name := range config.Flags() {
		if name == "config" {
			continue
		}
		if _, ok := sample[name]; !ok {
			t.Errorf("no sample for --%s", name)
		}
	}
	var args []string
	e := map[string]string{}
	var file strings.Builder
	for name, v := range sample {
		if v == "" {
			continue
		}
		args = append(args, "--"+name+"="+v) // the one form every flag takes (a switch: =true)
		e[config.EnvName(name)] = v
		file.WriteString(config.FileKey(name) + ": \"" + v + "\"\n")
	}
	byFlag := mustLoad(t, args, nil)
	byEnv := mustLoad(t, nil, env(e))
	p := writeFile(t, file.String())
	byFile := mustLoad(t, []string{"--config", p}, nil)
	byFile.File = ""
	if !reflect.DeepEqual(byFlag, byEnv) || !reflect.DeepEqual(byFlag, byFile) {
		t.Fatalf("flag, env and file differ:\n%+v\n%+v\n%+v", byFlag, byEnv, byFile)
	}
	if fmt.Sprint(byFlag.TrustedProxies) != "[10.0.0.0/8 192.168.1.1/32]" || byFlag.ClientIPHeader != "X-Real-IP" {
		t.Fatalf("proxies not applied: %v %q", byFlag.TrustedProxies, byFlag.ClientIPHeader)
	}
	if byFlag.NATSListen != "" || byFlag.Partitions != 7 || byFlag.LogLevel != slog.LevelDebug || !byFlag.AccessLog || byFlag.AdminToken.Reveal() != tokX || byFlag.Replicas != 3 ||
		!byFlag.ClaimExpiryEvents || byFlag.HTTPMaxConns != max(config.MinHTTPConns, 9*config.ConnsPerHookSlot) {
		t.Fatalf("samples not applied: %+v", byFlag)
	}
	if n := byFlag.NATS; n.Creds != "x.creds" || n.TLSCA != "ca.pem" || n.TLSCert != "nc.pem" || n.TLSKey != "nk.pem" {
		t.Fatalf("--nats-context not applied: %+v", n)
	}
	// The second half of the combinations: an embedded-server cluster, and
	// a context's user/password and url.
	args = []string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222, b:6222"}
	cfg := mustLoad(t, args, nil)
	if !reflect.DeepEqual(cfg.Routes, []string{"nats-route://a:6222", "b:6222"}) || !cfg.Clustered() {
		t.Fatalf("cluster: %+v", cfg)
	}
	p = writeFile(t, "cluster_listen: '127.0.0.1:6222'\nroutes: [nats-route://a:6222, nats-route://b:6222]\nnats_listen: off\n")
	cfg = mustLoad(t, []string{"--config", p}, nil)
	if !reflect.DeepEqual(cfg.Routes, []string{"nats-route://a:6222", "nats-route://b:6222"}) || cfg.NATSListen != "" {
		t.Fatalf("routes list in file: %+v", cfg)
	}
	if cfg = mustLoad(t, []string{"--claims-persist", "async"}, nil); cfg.ClaimsPersist != config.PersistAsync {
		t.Fatalf("--claims-persist async: %q", cfg.ClaimsPersist)
	}
	cfg = mustLoad(t, []string{"--nats-context", writeFile(t, `{"url": "nats://n:4222", "user": "u", "password": "pw", "tls_first": true}`)}, nil)
	if cfg.NATSURL != "nats://n:4222" || cfg.NATS.User != "u" || cfg.NATS.Password.Reveal() != "pw" || !cfg.NATS.TLSFirst {
		t.Fatalf("context url/user: %+v", cfg.NATS)
	}
}

// The durability level: --durability and the level a node's mode gets.
func TestDurability(t *testing.T) {
	cluster := []string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222"}
	cases := []struct {
		args          []string
		want, inForce string
		serverSync    bool // the embedded nats-server fsyncs every write
	}{
		{nil, config.DurabilitySynced, config.DurabilitySynced, false},
		{[]string{"--durability", "acked"}, config.DurabilityAcked, config.DurabilityAcked, false},
		{[]string{"--durability", "sync-always"}, config.DurabilitySyncAlways, config.DurabilitySyncAlways, true},
		// sluice cannot sync an external server's disk.
		{[]string{"--nats-url", "nats://x:4222"}, config.DurabilitySynced, config.DurabilityAcked, false},
		{[]string{"--nats-url", "nats://x:4222", "--durability", "sync-always"}, config.DurabilitySyncAlways, config.DurabilityAcked, false},
		// A cluster is synced by default: at R1 by the cluster's group
		// sync, with replicas by the servers fsyncing each Raft append.
		{cluster, config.DurabilitySynced, config.DurabilitySynced, false},
		{append(cluster, "--replicas", "3"), config.DurabilitySynced, config.DurabilitySynced, true},
		{append(cluster, "--durability", "sync-always"), config.DurabilitySyncAlways, config.DurabilitySyncAlways, true},
		{append(cluster, "--durability", "acked"), config.DurabilityAcked, config.DurabilityAcked, false},
	}
	for _, c := range cases {
		cfg := mustLoad(t, c.args, nil)
		if cfg.Durability != c.want || cfg.DurabilityInForce() != c.inForce || cfg.ServerSyncAlways() != c.serverSync {
			t.Errorf("%v: durability %q in force %q server sync %v, want %q, %q and %v", c.args, cfg.Durability, cfg.DurabilityInForce(), cfg.ServerSyncAlways(), c.want, c.inForce, c.serverSync)
		}
	}
	if _, err := config.Parse([]string{"--durability", "fsync"}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), `--durability: invalid level "fsync" (want synced, acked, sync-always)`) {
		t.Fatalf("--durability fsync: %v", err)
	}
}

// TestValidationErrors: every invalid setting is an error naming its flag
// (and its source when not the command line).
func TestValidationErrors(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--partitions", "0"}, nil, "config: --partitions: must be 1..4096"},
		{[]string{"--partitions", "4097"}, nil, "config: --partitions: must be 1..4096"},
		{[]string{"--partitions", "x"}, nil, "--partitions: must be 1..4096"},
		{[]string{"--partitions", "64/5"}, nil, "config: --partitions: 5 shards do not divide 64 partitions"},
		{[]string{"--partitions", "64/32"}, nil, "config: --partitions: shards must be 1..16"},
		{[]string{"--partitions", "64/"}, nil, "config: --partitions: shards must be 1..16"},
		{nil, map[string]string{"SLUICE_PARTITIONS": "0"}, "config: --partitions (from $SLUICE_PARTITIONS): must be"},
		{[]string{"--replicas", "6"}, nil, "--replicas: must be 1..5"},
		{[]string{"--replicas", "3"}, nil, "--replicas: 3 replicas need a cluster"},
		{[]string{"--claims-persist", "fast"}, nil, `--claims-persist: invalid mode "fast" (want sync or async)`},
		{[]string{"--claims-persist", "async", "--replicas", "3", "--nats-url", "nats://x"}, nil, "--claims-persist: async is for R1 file storage only, not with --replicas 3"},
		{[]string{"--http-addr", "localhost"}, nil, "--http-addr: invalid address"},
		{[]string{"--http-addr", "h:99999"}, nil, "--http-addr: invalid port"},
		{[]string{"--nats-listen", "nope"}, nil, "--nats-listen: invalid address"},
		{[]string{"--data-dir", ""}, nil, "--data-dir: must not be empty"},
		{[]string{"--prefix", "a..b"}, nil, "--prefix: invalid prefix"},
		{[]string{"--prefix", "a b"}, nil, "--prefix: invalid prefix"},
		{[]string{"--prefix", "a.*"}, nil, "--prefix: invalid prefix"},
		{[]string{"--prefix", ""}, nil, "--prefix: must be 1..64 bytes"},
		{[]string{"--prefix", strings.Repeat("a", 65)}, nil, "--prefix: must be 1..64 bytes"},
		{[]string{"--store-timeout", "0s"}, nil, "--store-timeout: must be positive"},
		{[]string{"--store-timeout", "soon"}, nil, "--store-timeout: invalid duration"},
		{[]string{"--pending-ttl", "-1s"}, nil, "--pending-ttl: must be positive"},
		{[]string{"--dedupe-ttl", "0"}, nil, "--dedupe-ttl: must be positive"},
		{[]string{"--replay-capacity", "0"}, nil, "--replay-capacity: must be 1.."},
		{[]string{"--log-level", "trace"}, nil, `--log-level: invalid level "trace"`},
		{[]string{"--log-format", "xml"}, nil, `--log-format: invalid format "xml"`},
		{[]string{"--access-log", "--log-level", "warn"}, nil, "--access-log: its lines are at info level, which --log-level warn drops"},
		{[]string{"--tls-cert", "c"}, nil, "--tls-cert and --tls-key: give both or neither"},
		{[]string{"--tls-key", "k"}, nil, "--tls-cert and --tls-key: give both or neither"},
		{[]string{"--sync-interval", "5s"}, nil, "flag provided but not defined: -sync-interval"},
		{[]string{"--nats-context", "/nonexistent/ctx.json"}, nil, "config: --nats-context: /nonexistent/ctx.json: open"},
		{[]string{"--nats-url", "nats://x", "--nats-config", "nats.conf"}, nil, "--nats-config: "},
		{[]string{"--nats-url", "http://x:1"}, nil, "--nats-url: URL \"http://x:1\": scheme must be one of nats"},
		{[]string{"--nats-url", "nats://a:1,,nats://b:2"}, nil, "--nats-url: empty URL"},
		{[]string{"--nats-url", "nats://u:hunter2@a:1"}, nil, "--nats-url: URL \"nats://[redacted]@a:1\": credentials in the URL"},
		{[]string{"--nats-url", "nats://a:0"}, nil, "--nats-url: URL \"nats://a:0\": invalid port"},
		{[]string{"--nats-url", "nats://x", "--cluster-listen", ":6222"}, nil, "--cluster-listen: only for the embedded server"},
		{[]string{"--routes", "nats-route://a:1"}, nil, "--routes: needs --cluster-listen"},
		{[]string{"--cluster-listen", ":1", "--routes", "http://a:1"}, nil, "--routes: URL"},
		{[]string{"--bogus"}, nil, "config: flag provided but not defined: -bogus"},
		{[]string{"--partitions"}, nil, "flag needs an argument: -partitions"},
		{[]string{"extra"}, nil, `config: unexpected argument "extra"`},
		{[]string{"--config", "/nonexistent/edge.yaml"}, nil, "config: --config: open /nonexistent/edge.yaml"},
		{nil, map[string]string{"SLUICE_CONFIG": "/nonexistent/x.yaml"}, "config: --config (from $SLUICE_CONFIG): open"},
	}
	for _, tc := range cases {
		_, err := config.Parse(tc.args, env(tc.env), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %v) = %v; want error containing %q", tc.args, tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks a password: %v", err)
		}
	}
}

// TestFileErrors: every file error names the field by its full path.
func TestFileErrors(t *testing.T) {
	cases := []struct {
		yaml string
		env  map[string]string
		want string
	}{
		{"bogus: 1\n", nil, "line 1: unknown field bogus"},
		{"config: other.yaml\n", nil, "unknown field config"},
		{"defaults:\n  limit: {}\n", nil, "line 2: unknown field defaults.limit"},
		{"defaults:\n  limits: {hooks: {rate: 1, brust: 2}}\n", nil, "unknown field defaults.limits.hooks.brust"},
		{"defaults:\n  source: {verify: github}\n", nil, "unknown field defaults.source.verify"},
		{"tenants:\n  acme:\n    sources:\n      gh: {secrte: x}\n", nil, "line 4: unknown field tenants.acme.sources.gh.secrte"},
		{"tenants:\n  acme:\n    limit: {}\n", nil, "unknown field tenants.acme.limit"},
		{"partitions: 1\npartitions: 2\n", nil, "duplicate field partitions"},
		{"tenants:\n  a: {}\n  a: {}\n", nil, "duplicate field tenants.a"},
		{"tenants:\n  a: {limits: {}, limits: {}}\n", nil, "duplicate field tenants.a.limits"},
		{"partitions: [1]\n", nil, "partitions: want a scalar value"},
		{"http_addr: {a: 1}\n", nil, "http_addr: want a scalar value"},
		{"partitions: 0\n", nil, "--partitions (from partitions in "},
		{"allow_unknown: maybe\n", nil, `allow_unknown: want a boolean, got "maybe"`},
		{"allow_unknown: yes\n", nil, `allow_unknown: want a boolean, got "yes"`}, // YAML 1.1 words are not booleans here (the decoder would take them)
		{"tenants: [a]\n", nil, "tenants: want a mapping"},
		{"tenants:\n  acme: 5\n", nil, "tenants.acme: want a mapping"},
		{"tenants:\n  acme:\n    sources:\n      s: {dedupe: [x]}\n", nil, "tenants.acme.sources.s.dedupe: want a string"},
		{"defaults:\n  limits: {hooks: {burst: 1.5}}\n", nil, `defaults.limits.hooks.burst: want an integer, got "1.5"`},
		{"defaults:\n  limits: {hooks: {rate: 0}}\n", nil, "config: defaults.limits.hooks: rate must be a finite number > 0"},
		{"defaults:\n  limits: {bytes: {rate: .inf}}\n", nil, "defaults.limits.bytes: rate must be a finite number > 0"},
		{"defaults:\n  limits: {bytes: {rate: .nan}}\n", nil, "defaults.limits.bytes: rate must be a finite number > 0"},
		{"defaults:\n  limits: {hooks: {burst: 0}}\n", nil, "defaults.limits.hooks: burst must be >= 1"},
		{"defaults:\n  limits: {hooks: {rate: 1e-9, burst: 1000000000000}}\n", nil, "defaults.limits.hooks: rate 1e-09 with burst 1000000000000: gcra: invalid limit"}, // the edge could not compute this limit: every hook would be a 500
		{"tenants:\n  acme: {limits: {bytes: {rate: -1}}}\n", nil, "config: tenants.acme.limits.bytes: rate must be"},
		{"defaults:\n  source: {dedupe: gitlab}\n", nil, `config: defaults.source.dedupe: webhook: invalid dedupe spec "gitlab"`},
		{"defaults:\n  source: {max_body_bytes: 0}\n", nil, "config: defaults.source.max_body_bytes: must be 1.."},
		{"tenants:\n  acme:\n    sources:\n      raw: {max_body_bytes: 2147483648}\n", nil, "tenants.acme.sources.raw.max_body_bytes: must be 1.."},
		{"tenants:\n  acme:\n    sources:\n      gh: {dedupe: \"header:\"}\n", nil, `config: tenants.acme.sources.gh.dedupe: webhook: invalid dedupe spec "header:"`},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: bitbucket, secret: x}\n", nil, `config: tenants.acme.sources.gh.verify: unknown verifier "bitbucket"`},
		{"tenants:\n  acme:\n    sources:\n      pay: {verify: stripe}\n", nil, "config: tenants.acme.sources.pay: verify stripe needs secret or secret_env"},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: {type: hmac, header: X-Sig, algorithm: hmac-sha256, format: single, encoding: hex, signed: \"{timestamp}\"}, secret: 0123456789abcdef}\n", nil, "config: tenants.acme.sources.gh.verify: webhook: invalid verification scheme"},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: {type: hmac, hedaer: X}, secret: 0123456789abcdef}\n", nil, `config: tenants.acme.sources.gh.verify: "hedaer": webhook: invalid verification scheme: unknown field`},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: {name: twilio}, secret: 0123456789abcdef}\n", nil, "config: tenants.acme.sources.gh.verify: webhook: invalid verification scheme twilio"},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: slack, secret: short}\n", nil, "config: tenants.acme.sources.gh.secret: webhook: invalid secret"},
		{"tenants:\n  acme:\n    sources:\n      gh: {event_type: \"json:\"}\n", nil, "config: tenants.acme.sources.gh.event_type: webhook: invalid event_type spec"},
		{"tenants:\n  acme:\n    sources:\n      gh: {methods: [GET]}\n", nil, `config: tenants.acme.sources.gh.methods: "GET" is not one of POST, PUT, PATCH`},
		{"tenants:\n  acme:\n    sources:\n      gh: {methods: []}\n", nil, "config: tenants.acme.sources.gh.methods: give at least one method"},
		{"tenants:\n  acme:\n    sources:\n      gh: {handshake: crc}\n", nil, "config: tenants.acme.sources.gh.handshake: crc needs verify with an hmac-sha256 scheme"},
		{"tenants:\n  acme:\n    sources:\n      gh: {handshake: crc, verify: stripe, secret: x}\n", nil, "config: tenants.acme.sources.gh.handshake: crc needs verify"},
		{"tenants:\n  acme:\n    sources:\n      gh: {handshake: okta}\n", nil, `config: tenants.acme.sources.gh.handshake: unknown handshake "okta" (want slack or crc)`},
		{"tenants:\n  acme:\n    sources:\n      gh: {content_types: [json]}\n", nil, "config: tenants.acme.sources.gh.content_types:"},
		{"tenants:\n  acme:\n    sources:\n      gh: {ip_allow: [\"10.0.0.0/8\", \"fe80::1%eth0\"]}\n", nil, "config: tenants.acme.sources.gh.ip_allow:"},
		{"trusted_proxies: 10.0.0.0/99\n", nil, "--trusted-proxies (from trusted_proxies in "},
		{"client_ip_header: \"X Y\"\n", nil, "--client-ip-header (from client_ip_header in "},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: [slack], secret: x}\n", nil, "tenants.acme.sources.gh.verify: want a preset name or a mapping"},
		{"tenants:\n  acme:\n    sources:\n      gh: {verify: {name: svix, fallback: {header: [x]}}, secret: x}\n", nil, "tenants.acme.sources.gh.verify.fallback.header: want a string"},
		{"tenants:\n  acme:\n    sources:\n      pay: {verify: stripe, secret: \"\"}\n", nil, "config: tenants.acme.sources.pay: verify stripe needs secret or secret_env"},
		{"tenants:\n  acme:\n    sources:\n      pay: {secret: s3cr3t}\n", nil, "config: tenants.acme.sources.pay: a secret needs verify"},
		{"tenants:\n  acme:\n    sources:\n      pay: {verify: stripe, secret: a, secret_env: B}\n", nil, "tenants.acme.sources.pay: secret and secret_env are exclusive"},
		{"tenants:\n  acme:\n    sources:\n      pay: {verify: stripe, secret_env: PAY_SECRET}\n", nil, "config: tenants.acme.sources.pay.secret_env: environment variable PAY_SECRET is not set"},
		{"tenants:\n  acme:\n    sources:\n      pay: {verify: stripe, secret_env: \"1BAD\"}\n", nil, `tenants.acme.sources.pay.secret_env: invalid environment variable name "1BAD"`},
		{"tenants:\n  acme:\n    sources:\n      sw: {verify: standard_webhooks, secret: \"whsec_not*base64\"}\n", nil, "config: tenants.acme.sources.sw.secret: webhook: invalid secret"},
		{"tenants:\n  acme:\n    sources:\n      sw: {verify: standard_webhooks, secret_env: SW}\n", map[string]string{"SW": "whsec_!!"}, "config: tenants.acme.sources.sw.secret_env: webhook: invalid secret"},
		{"tenants:\n  \"a/b\": {}\n", nil, "config: tenants.a/b: invalid tenant name"},
		{"tenants:\n  \"" + strings.Repeat("t", 129) + "\": {}\n", nil, "invalid tenant name"},
		{"tenants:\n  acme:\n    sources:\n      \"s s\": {}\n", nil, "config: tenants.acme.sources.s s: invalid source name"},
		{"- a\n- b\n", nil, "the file must be a mapping"},
		{"a: 1\n---\nb: 2\n", nil, "more than one YAML document"},
		{"a: [\n", nil, "edge.yaml: yaml:"},
		{"a: &x [*x]\n", nil, "edge.yaml"},
		{"{[1]: 2}\n", nil, "keys must be scalars"},
	}
	for _, tc := range cases {
		p := writeFile(t, tc.yaml)
		_, err := config.Parse([]string{"--config", p}, env(tc.env), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("file %q: err = %v; want it to contain %q", tc.yaml, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "not*base64")) {
			t.Errorf("error leaks a secret: %v", err)
		}
	}
}

// TestEmptyFile: an empty or null file is the built-in default.
func TestEmptyFile(t *testing.T) {
	for _, body := range []string{"", "\n# nothing\n", "~\n", "---\n"} {
		cfg := mustLoad(t, []string{"--config", writeFile(t, body)}, nil)
		if !cfg.AllowUnknown || cfg.Partitions != 64 || len(cfg.Tenants) != 0 {
			t.Errorf("file %q: %+v", body, cfg)
		}
	}
}

// TestHelp: -h prints every flag with its environment twin and returns
// flag.ErrHelp.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out bytes.Buffer
		cfg, err := config.Parse([]string{arg}, nil, &out)
		if !errors.Is(err, flag.ErrHelp) || cfg != nil {
			t.Fatalf("%s: %v, %v; want flag.ErrHelp", arg, cfg, err)
		}
		usage := out.String()
		for _, name := range config.Flags() {
			if !strings.Contains(usage, "--"+name+" ") || !strings.Contains(usage, "$"+config.EnvName(name)) {
				t.Errorf("usage lacks --%s or $%s:\n%s", name, config.EnvName(name), usage)
			}
		}
		for _, s := range []string{`(default "127.0.0.1:8080")`, `(default "64")`, "SLUICE_HTTP_ADDR", "off = in-process only"} {
			if !strings.Contains(usage, s) {
				t.Errorf("usage lacks %q", s)
			}
		}
	}
	if got := config.EnvName("http-addr"); got != "SLUICE_HTTP_ADDR" {
		t.Errorf("EnvName = %s", got)
	}
	if got := config.FileKey("nats-listen"); got != "nats_listen" {
		t.Errorf("FileKey = %s", got)
	}
}

// Admin tokens of the minimum length (16 bytes).
const (
	tokF = "file-token-0123456"
	tokE = "env-token-01234567"
	tokX = "flag-token-0123456"
)

// TestAdminTokenLength: a short admin token is refused, naming its length
// but never its value.
func TestAdminTokenLength(t *testing.T) {
	_, err := config.Parse([]string{"--admin-token", "short-s3cret"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "--admin-token: must be at least 16 bytes (got 12)") || strings.Contains(err.Error(), "short-s3cret") {
		t.Fatalf("short token: %v", err)
	}
}

// TestEmbeddedServerExposure: a non-loopback client, route or leaf
// listener without the authentication --nats-config gives it refuses to
// start, naming what to add.
func TestEmbeddedServerExposure(t *testing.T) {
	auth := natsConf(t, `authorization { user: a, password: "pw-0123456789abcdef" }
cluster { authorization { user: sluice-route, password: "route-0123456789" } }
leafnodes { authorization { user: sluice-leaf, password: "leaf-0123456789ab" } }`)
	bad := []struct {
		args []string
		err  string
	}{
		{[]string{"--nats-listen", "0.0.0.0:4222"}, "--nats-listen: 0.0.0.0:4222 is not a loopback address and the embedded server would accept any client: add nats_users"},
		{[]string{"--cluster-listen", "0.0.0.0:6222"}, "--cluster-listen: 0.0.0.0:6222 is not a loopback address and any host could join as a route: give cluster an authorization block"},
		{[]string{"--leaf-listen", "0.0.0.0:7422"}, "--leaf-listen: 0.0.0.0:7422 is not a loopback address and any host could join as a leaf: give leafnodes an authorization block"},
		{[]string{"--nats-config", natsConf(t, "port: 4222")}, "--nats-listen: 0.0.0.0:4222 is not a loopback address"},
		{[]string{"--nats-config", natsConf(t, "cluster { listen: 0.0.0.0:6222, routes: [nats-route://a:6222] }")}, "--cluster-listen: 0.0.0.0:6222 is not a loopback"},
	}
	for _, c := range bad {
		if _, err := config.Parse(c.args, nil, nil); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: %v, want %q", c.args, err, c.err)
		}
	}
	for _, args := range [][]string{
		{"--nats-listen", "0.0.0.0:4222", "--nats-config", auth},
		{"--nats-listen", "127.0.0.1:4222"},
		{"--cluster-listen", "0.0.0.0:6222", "--routes", "nats-route://a:6222", "--nats-config", auth},
		{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222"},
		{"--leaf-listen", "0.0.0.0:7422", "--nats-config", auth},
	} {
		mustLoad(t, args, nil)
	}
	// A cluster listener without routes cannot form a JetStream cluster:
	// said at once, naming the fix (nats-server would say it after 10 s).
	if _, err := config.Parse([]string{"--cluster-listen", "127.0.0.1:6222"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--cluster-listen needs --routes") {
		t.Errorf("--cluster-listen without --routes: %v", err)
	}
}

// natsConf writes a nats-server configuration file.
func natsConf(t *testing.T, text string) string {
	t.Helper()
	return testkit.WriteTemp(t, "nats.conf", []byte(text+"\n"))
}

// TestNATSConfigFile: testdata/nats.conf loads, and what it sets is what
// sluice's checks see (the listener, the cluster, the hub).
func TestNATSConfigFile(t *testing.T) {
	// nats-server reads $VAR from the process's environment.
	t.Setenv("NATS_APP_PASSWORD", "app-0123456789abcdef")
	t.Setenv("NATS_CLUSTER_TOKEN", tokX)
	t.Setenv("NATS_LEAF_TOKEN", tokE)
	cfg := mustLoad(t, []string{"--nats-config", "../testdata/nats.conf", "--data-dir", t.TempDir()}, nil)
	if f := cfg.NATSFile; f == nil || f.Options().Users[0].Username != "app" || f.Options().JetStreamMaxStore != 1<<30 {
		t.Fatalf("file options: %+v", f)
	}
	if cfg.NATSListen != "127.0.0.1:4222" || !cfg.Clustered() || !cfg.Hub() || cfg.Leaf() || cfg.ServerSyncAlways() {
		t.Fatalf("the file's listeners: listen %q clustered %v hub %v server sync %v (an R1 cluster: sluice's group sync)", cfg.NATSListen, cfg.Clustered(), cfg.Hub(), cfg.ServerSyncAlways())
	}
	// A leaf's file: its remotes make it a leaf.
	cfg = mustLoad(t, []string{"--leaf-name", "e1", "--nats-config", natsConf(t, `leafnodes { remotes: [ { url: "nats-leaf://u:p@hub:7422" } ] }`)}, nil)
	if !cfg.Leaf() || cfg.Hub() {
		t.Fatal("leafnodes remotes: not a leaf")
	}
}

// TestNATSConfigErrors: a bad file names the file and line; a file that
// contradicts what sluice decides, or that sets what a flag sets too, is
// refused naming both.
func TestNATSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		file string
		want string
	}{
		{nil, "listen: 127.0.0.1:4222\njetstream {\n  max_file_store: 1GB\n", "Parse error on line 4"},
		{nil, "port: 4222\nlisten: [\n", "Parse error on line 3"},
		{nil, "port: 4222\njetstream { max_file_store: lots }\n", "nats.conf:2:"},
		{nil, "authorization { users: [ {user: a, password: $UNSET_VAR_0123} ] }", "variable reference for 'UNSET_VAR_0123'"},
		{nil, "jetstream: disabled", "jetstream: disables JetStream"},
		{nil, "jetstream { store_dir: /elsewhere }", "jetstream store_dir: /elsewhere is not sluice's store " + filepath.Join(dir, "jetstream")},
		{[]string{"--nats-listen", "127.0.0.1:5222"}, "listen: 127.0.0.1:4222", "listen: set both here and by --nats-listen: keep one"},
		{[]string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222"}, "cluster { listen: 127.0.0.1:6223 }", "cluster listen: set both here and by --cluster-listen"},
		{[]string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222"}, "cluster { routes: [nats-route://b:6222] }", "cluster routes: set both here and by --routes"},
		{[]string{"--leaf-listen", "127.0.0.1:7422"}, "leafnodes { listen: 127.0.0.1:7423 }", "leafnodes listen: set both here and by --leaf-listen"},
		{[]string{"--hub-url", "nats-leaf://hub:7422", "--leaf-name", "e1"}, `leafnodes { remotes: [ { url: "nats-leaf://hub:7422" } ] }`, "leafnodes remotes: set both here and by --hub-url"},
		{[]string{"--hub-url", "nats-leaf://hub:7422", "--leaf-name", "e1"}, "jetstream { domain: other }", `a leaf's JetStream domain is its --leaf-name "e1"`},
		{[]string{"--hub-url", "nats-leaf://hub:7422", "--leaf-name", "e1"}, "server_name: other", "a leaf's server name is its --leaf-name"},
		{[]string{"--leaf-listen", "127.0.0.1:7422"}, "jetstream { domain: central }", `a hub's JetStream domain is "hub"`},
		{nil, "jetstream { sync_interval: always }", "jetstream sync_interval: always contradicts --durability synced: use --durability sync-always"},
		{[]string{"--durability", "sync-always"}, "jetstream { sync_interval: 5s }", "jetstream sync_interval: 5s contradicts --durability sync-always"},
		{[]string{"--config", writeFile(t, "nats_users: {s: {role: operator, password: p-0123456789abcdef}}\n")}, "authorization { token: t-0123456789abcdef }", "nats_users: not with the token of --nats-config"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := config.Parse(append([]string{"--data-dir", dir, "--nats-config", p}, c.args...), nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) && !strings.Contains(err.Error(), "nats_users") {
			t.Errorf("%q %v: %v, want an error naming %s and containing %q", c.file, c.args, err, p, c.want)
		}
	}
	// What sluice decides, said the same way, is no contradiction.
	for _, file := range []string{"jetstream { store_dir: " + filepath.Join(dir, "jetstream") + " }", "jetstream { sync_interval: 10s, max_file_store: 1GB }"} {
		if err := os.WriteFile(filepath.Join(dir, "ok.conf"), []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		mustLoad(t, []string{"--data-dir", dir, "--nats-config", filepath.Join(dir, "ok.conf")}, nil)
	}
}

// TestLeafConfig: the hub's and the edge's flags and their combinations
// (the listener's exposure: TestEmbeddedServerExposure).
func TestLeafConfig(t *testing.T) {
	edge := []string{"--hub-url", "nats-leaf://hub:7422,tls://hub2:7422", "--leaf-name", "e-1"}
	cfg := mustLoad(t, edge, nil)
	if len(cfg.HubURLs) != 2 || cfg.LeafName != "e-1" || cfg.HubDomain != "hub" || !cfg.Leaf() {
		t.Fatalf("edge: %+v", cfg)
	}
	cfg = mustLoad(t, []string{"--leaf-listen", "127.0.0.1:7422"}, nil)
	if cfg.LeafListen != "127.0.0.1:7422" || !cfg.Hub() || cfg.HubDomain != "hub" {
		t.Fatalf("hub: %+v", cfg)
	}
	bad := []struct {
		args []string
		err  string
	}{
		{[]string{"--leaf-name", "e1"}, "--leaf-name: needs --hub-url"},
		{[]string{"--split-share", "3"}, "--split-share: needs --hub-url"},
		{append(edge, "--split-share", "0"), "--split-share"},
		{append(edge, "--split-share", "1001"), "--split-share"},
		{[]string{"--hub-url", "nats-leaf://hub:7422"}, "--hub-url: needs --leaf-name"},
		{append(edge, "--nats-url", "nats://n:4222"), "--hub-url: a leaf runs the embedded server"},
		{append(edge, "--cluster-listen", "127.0.0.1:6222"), "a leaf is a single node"},
		{[]string{"--hub-url", "nats-leaf://hub:7422", "--leaf-name", "hub"}, `--leaf-name: "hub" is the hub's JetStream domain`},
		{[]string{"--hub-url", "nats-leaf://u:p@hub:7422", "--leaf-name", "e1"}, "credentials in the URL are not accepted"},
		{[]string{"--hub-url", "http://hub:7422", "--leaf-name", "e1"}, "scheme must be one of nats-leaf, tls"},
		{[]string{"--leaf-listen", "127.0.0.1:x"}, "--leaf-listen: invalid port"},
		{[]string{"--hub-url", "nats-leaf://hub:7422", "--leaf-name", "e.1"}, "--leaf-name: invalid name"},
		{[]string{"--nats-url", "nats://n:4222", "--leaf-listen", "127.0.0.1:7422"}, "only for the embedded server"},
	}
	for _, c := range bad {
		if _, err := config.Parse(c.args, nil, nil); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: %v, want %q", c.args, err, c.err)
		}
	}
}

// TestNATSContext: --nats-context reads a nats CLI context (a file, or a
// saved context's name); what sluice cannot honour is refused, naming the
// field.
func TestNATSContext(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prod.json"), []byte(`{"url": "tls://n:4222", "token": "t-0123456789", "ca": "~/ca.pem"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, []string{"--nats-context", "prod"}, env(map[string]string{"XDG_CONFIG_HOME": home, "HOME": "/home/u"}))
	if cfg.NATSURL != "tls://n:4222" || cfg.NATS.Token.Reveal() != "t-0123456789" || cfg.NATS.TLSCA != "/home/u/ca.pem" {
		t.Fatalf("saved context: %q %+v", cfg.NATSURL, cfg.NATS)
	}
	for _, c := range []struct{ ctx, want string }{
		{`{"url": "nats://n:4222", "jetstream_domain": "x"}`, "jetstream_domain: not supported by sluice"},
		{`{"url": "nats://n:4222", "creds": "a", "token": "b"}`, "creds, token: choose one authentication method"},
		{`{"url": "nats://n:4222", "cert": "c"}`, "cert and key: give both or neither"},
		{`{"user": "u"}`, "no url: add --nats-url"},
		{"{\n\"url\": \"nats://n:4222\",\n}", "line 3"},
	} {
		p := writeFile(t, c.ctx)
		if _, err := config.Parse([]string{"--nats-context", p}, nil, nil); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want %q", c.ctx, err, c.want)
		}
	}
	if _, err := config.Parse([]string{"--nats-url", "nats://a:4222", "--nats-context", writeFile(t, `{"url": "nats://b:4222"}`)}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "differ: keep one") {
		t.Errorf("two urls: %v", err)
	}
}

// TestBoolFlagsBare: a bool setting is a switch on the command line, as
// the docs write it (--claim-expiry-events), and takes =true/=false; a
// separate value is refused naming the form to write; the environment twin
// and the file take a value as before.
func TestBoolFlagsBare(t *testing.T) {
	for _, c := range []struct {
		args       []string
		env        map[string]string
		loss, expi bool
	}{
		{[]string{"--accept-data-loss"}, nil, true, false},
		{[]string{"--claim-expiry-events", "--partitions", "4"}, nil, false, true},
		{[]string{"--accept-data-loss=false", "--claim-expiry-events=false"}, nil, false, false},
		{[]string{"-accept-data-loss", "--claim-expiry-events=true"}, nil, true, true},
		{[]string{"--accept-data-loss=false"}, map[string]string{"SLUICE_ACCEPT_DATA_LOSS": "true"}, false, false},
		{nil, map[string]string{"SLUICE_ACCEPT_DATA_LOSS": "true", "SLUICE_CLAIM_EXPIRY_EVENTS": "1"}, true, true},
	} {
		cfg := mustLoad(t, c.args, env(c.env))
		if cfg.AcceptDataLoss != c.loss || cfg.ClaimExpiryEvents != c.expi {
			t.Errorf("%q %v: accept-data-loss %t claim-expiry-events %t, want %t %t", c.args, c.env, cfg.AcceptDataLoss, cfg.ClaimExpiryEvents, c.loss, c.expi)
		}
	}
	if cfg := mustLoad(t, []string{"--accept-data-loss"}, nil); !cfg.AcceptDataLoss {
		t.Error("--accept-data-loss bare did not set it")
	}
	for args, want := range map[string]string{
		"--accept-data-loss true":  "write --accept-data-loss or --accept-data-loss=true",
		"--accept-data-loss=maybe": "--accept-data-loss: strconv.ParseBool",
	} {
		if _, err := config.Parse(strings.Fields(args), nil, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
