package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/names"
	"github.com/sluice-dev/sluice/protocol"
)

// setting is one flag with its default, usage and setter. The setter parses
// and validates the raw value; its error is prefixed with the flag's name.
type setting struct {
	name  string
	kind  string // value placeholder in the usage
	def   string
	usage string
	set   func(c *Config, v string) error
}

// checkEmbeddedSecurity refuses an embedded server that would let anyone
// in: a non-loopback client, route or leaf listener without the
// authentication --nats-config (or nats_users, for clients) gives it.
func (c *Config) checkEmbeddedSecurity() error {
	if c.NATSURL != "" {
		return nil
	}
	f := c.NATSFile
	if c.NATSListen != "" && !IsLoopback(c.NATSListen) && !f.clientAuth() && len(c.NATSUsers) == 0 {
		return fmt.Errorf("config: --nats-listen: %s is not a loopback address and the embedded server would accept any client: "+
			"add nats_users (roles) in --config or an authorization block (or tls with verify) in --nats-config, or listen on 127.0.0.1", c.NATSListen)
	}
	if l := c.leafListen(); l != "" && !IsLoopback(l) && !f.leafAuth() {
		return fmt.Errorf("config: --leaf-listen: %s is not a loopback address and any host could join as a leaf: "+
			"give leafnodes an authorization block (or tls with verify) in --nats-config, or listen on 127.0.0.1", l)
	}
	if l := c.clusterListen(); l != "" && !IsLoopback(l) && !f.clusterAuth() {
		return fmt.Errorf("config: --cluster-listen: %s is not a loopback address and any host could join as a route: "+
			"give cluster an authorization block (or tls with verify) in --nats-config, or listen on 127.0.0.1", l)
	}
	return nil
}

// Bounds of numeric settings.
const (
	MaxPartitions = 4096 // quota.MaxPartitions
	MaxShards     = protocol.MaxShards
	MaxSplitShare = 1000 // --split-share
	MaxReplicas   = 5    // JetStream's limit
	// MinAdminTokenBytes is the shortest --admin-token accepted.
	MinAdminTokenBytes = 16
)

// settings is the flag table of README.md (TestFlagsTableComplete), in
// usage order.
var settings = []setting{
	{"config", "path", "", "YAML configuration file", func(c *Config, v string) error {
		c.File = v
		return nil
	}},
	{"http-addr", "host:port", "127.0.0.1:8080", "HTTP listener", func(c *Config, v string) error {
		c.HTTPAddr = v
		return checkHostPort(v)
	}},
	{"http-advertise", "host:port", "", "this node's HTTP address as GET /v1/shards names it to clients (default: the listener's, the host name for an unspecified host)", func(c *Config, v string) error {
		c.HTTPAdvertise = v
		if v == "" {
			return nil
		}
		return checkHostPort(v)
	}},
	{"max-inflight-hooks", "n", strconv.Itoa(protocol.DefaultMaxInFlightHooks), "most hooks served at once; beyond it 503 overloaded with Retry-After at once", func(c *Config, v string) error {
		n, err := parseInt(v, 1, 1<<20)
		c.MaxInFlightHooks = int(n)
		return err
	}},
	{"tls-cert", "path", "", "certificate file for HTTPS (with --tls-key)", str(func(c *Config) *string { return &c.TLSCert })},
	{"tls-key", "path", "", "key file for HTTPS (with --tls-cert)", str(func(c *Config) *string { return &c.TLSKey })},
	{"data-dir", "path", "./data", "JetStream storage of the embedded server", func(c *Config, v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		c.DataDir = v
		return nil
	}},
	{"nats-config", "path", "", "nats-server configuration file of the embedded server (TLS, authorization, accounts, cluster, leafnodes, JetStream limits)", str(func(c *Config) *string { return &c.NATSConfig })},
	{"nats-listen", "host:port|off", "127.0.0.1:4222", "embedded server's client listener; off = in-process only", func(c *Config, v string) error {
		if strings.EqualFold(v, "off") {
			c.NATSListen = ""
			return nil
		}
		c.NATSListen = v
		return checkHostPort(v)
	}},
	{"nats-url", "urls", "", "use an existing NATS deployment (comma-separated URLs) instead of the embedded server", func(c *Config, v string) error {
		c.NATSURL = v
		if v == "" {
			return nil
		}
		for u := range strings.SplitSeq(v, ",") {
			if err := checkURL(strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				return err
			}
		}
		return nil
	}},
	{"nats-context", "path", "", "NATS CLI context file (JSON: url, creds, nkey, user/password, token, cert/key/ca) for --nats-url", str(func(c *Config) *string { return &c.NATSContext })},
	{"cluster-listen", "host:port", "", "embedded server's cluster (routes) listener", optional(func(c *Config) *string { return &c.ClusterListen }, checkHostPort)},
	{"routes", "urls", "", "comma-separated routes to other sluice nodes (nats-route://host:port)", urls(func(c *Config) *[]string { return &c.Routes }, "nats-route", "nats", "tls")},
	{"leaf-listen", "host:port", "", "embedded server's leaf-node listener for leaves (a hub)", optional(func(c *Config) *string { return &c.LeafListen }, checkHostPort)},
	{"hub-url", "urls", "", "leaf mode: the hub's leaf-node listener(s) (comma-separated nats-leaf://host:port); hooks are stored locally and forwarded", urls(func(c *Config) *[]string { return &c.HubURLs }, "nats-leaf", "tls")},
	{"leaf-name", "name", "", "leaf mode: this leaf's name, unique among the hub's leaves (its JetStream domain)", func(c *Config, v string) error {
		c.LeafName = v
		if v == "" {
			return nil
		}
		return names.ValidateDomain(v)
	}},
	{"split-share", "n", "1", "leaf mode: while this leaf decides its limits itself (cut off from its hub), it applies 1/n of each limit", func(c *Config, v string) error {
		n, err := parseInt(v, 1, MaxSplitShare)
		c.SplitShare = int(n)
		return err
	}},
	{"prefix", "prefix", protocol.DefaultPrefix, "subject prefix", func(c *Config, v string) error {
		c.Prefix = v
		return checkPrefix(v)
	}},
	{"partitions", "n[/shards]", strconv.Itoa(protocol.DefaultPartitions), "quota partitions, and after a slash the shards (streams and claims buckets) they are spread over, which must divide them (default 1); both fixed for the fleet's life, a leaf's must be its hub's", func(c *Config, v string) error {
		p, s, hasShards := strings.Cut(v, "/")
		n, err := parseInt(p, 1, MaxPartitions)
		c.Partitions, c.Shards = int(n), 1
		if err != nil || !hasShards {
			return err
		}
		k, err := parseInt(s, 1, MaxShards)
		if err != nil {
			return fmt.Errorf("shards %w", err)
		}
		if n%k != 0 {
			return fmt.Errorf("%d shards do not divide %d partitions (a tenant's shard is its partition mod the shards)", k, n)
		}
		c.Shards = int(k)
		return nil
	}},
	{"replicas", "n", "1", "replicas of every bucket and stream", func(c *Config, v string) error {
		n, err := parseInt(v, 1, MaxReplicas)
		c.Replicas = int(n)
		return err
	}},
	{"admin-token", "secret", "", "bearer token enabling the admin API (at least 16 bytes)", token(func(c *Config) *Secret { return &c.AdminToken }, "; e.g. openssl rand -hex 32")},
	{"secrets-key-file", "path", "", "file of AES-256 keys (\"<id> <base64 of 32 bytes>\" per line, the first one encrypts) that seal source secrets stored through the admin API", str(func(c *Config) *string { return &c.SecretsKeyFile })},
	{"replay-capacity", "n", strconv.Itoa(protocol.DefaultReplayCapacity), "most replay claims held", func(c *Config, v string) error {
		n, err := parseInt(v, 1, 1<<40)
		c.ReplayCapacity = n
		return err
	}},
	{"store-timeout", "duration", protocol.DefaultTimeout.String(), "budget of one call to the fleet store", dur(func(c *Config) *time.Duration { return &c.StoreTimeout }, 1)},
	{"pending-ttl", "duration", protocol.DefaultPendingTTL.String(), "TTL of a pending dedupe claim (whole seconds, rounded up)", dur(func(c *Config) *time.Duration { return &c.PendingTTL }, 1)},
	{"dedupe-ttl", "duration", strconv.Itoa(int(protocol.DefaultCommittedTTL/time.Hour)) + "h", "TTL of a committed dedupe claim (whole seconds, rounded up)", dur(func(c *Config) *time.Duration { return &c.DedupeTTL }, 1)},
	{"hooks-max-age", "duration", "168h", "how long stored hooks are kept (0 = forever)", dur(func(c *Config) *time.Duration { return &c.HooksMaxAge }, 0)},
	{"hooks-max-bytes", "bytes", "0", "size bound of the hooks stream; when full, new hooks get 503 (0 = unlimited)", func(c *Config, v string) error {
		n, err := parseInt(v, 0, 1<<50)
		c.HooksMaxBytes = n
		return err
	}},
	{"durability", "level", DurabilitySynced, "what a 2xx waits for: synced (group sync: on disk), acked (JetStream's ack: page cache), sync-always (nats-server fsyncs every write)", func(c *Config, v string) error {
		if !slices.Contains(DurabilityLevels(), v) {
			return fmt.Errorf("invalid level %q (want %s)", v, strings.Join(DurabilityLevels(), ", "))
		}
		c.Durability = v
		return nil
	}},
	{"accept-data-loss", "bool", "false", "start although the data dir lacks streams or messages it had made durable (its record is rewritten from what is left)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.AcceptDataLoss = b
		return err
	}},
	{"claim-expiry-events", "bool", "false", "publish claim.expired events (expiry markers in the claims bucket and a watcher; costs ~3 messages per claim)", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.ClaimExpiryEvents = b
		return err
	}},
	{"claims-persist", "mode", PersistSync, "claims bucket persistence: sync, or async (R1 only: acked before written; a server crash can lose the last claims)", func(c *Config, v string) error {
		if v != PersistSync && v != PersistAsync {
			return fmt.Errorf("invalid mode %q (want %s or %s)", v, PersistSync, PersistAsync)
		}
		c.ClaimsPersist = v
		return nil
	}},
	{"trusted-proxies", "cidrs", "", "comma-separated proxies (CIDRs) whose --client-ip-header names the client for sources' ip_allow", func(c *Config, v string) error {
		c.TrustedProxies = nil
		for _, s := range strings.Split(v, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			p, err := ParsePrefix(s)
			if err != nil {
				return err
			}
			c.TrustedProxies = append(c.TrustedProxies, p)
		}
		return nil
	}},
	{"client-ip-header", "header", "X-Forwarded-For", "header a trusted proxy names the client in (rightmost address that is not a trusted proxy)", func(c *Config, v string) error {
		if !validHeaderName(v) {
			return fmt.Errorf("%.64q is not a header name", v)
		}
		c.ClientIPHeader = v
		return nil
	}},
	{"log-level", "level", "info", "debug, info, warn or error", func(c *Config, v string) error {
		switch v {
		case "debug":
			c.LogLevel = slog.LevelDebug
		case "info":
			c.LogLevel = slog.LevelInfo
		case "warn":
			c.LogLevel = slog.LevelWarn
		case "error":
			c.LogLevel = slog.LevelError
		default:
			return fmt.Errorf("invalid level %q (want debug, info, warn or error)", v)
		}
		return nil
	}},
	{"log-format", "format", "text", "text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("invalid format %q (want text or json)", v)
		}
		c.LogFormat = v
		return nil
	}},
	{"access-log", "bool", "false", "log one line per answered hook (tenant, source, status, id, duration, node) at info level", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.AccessLog = b
		return err
	}},
}

// validHeaderName reports whether s is an HTTP token of 1..128 bytes.
func validHeaderName(s string) bool { return names.HTTPToken(s, 128) }

// str sets a free-form string field.
func str(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		*field(c) = v
		return nil
	}
}

// optional sets a string field that is empty (unset) or passes check.
func optional(field func(*Config) *string, check func(string) error) func(*Config, string) error {
	return func(c *Config, v string) error {
		*field(c) = v
		if v == "" {
			return nil
		}
		return check(v)
	}
}

// urls sets a list field from comma-separated URLs (empty: none), each
// checked by checkURL with schemes.
func urls(field func(*Config) *[]string, schemes ...string) func(*Config, string) error {
	return func(c *Config, v string) error {
		list := field(c)
		*list = nil
		if v == "" {
			return nil
		}
		for r := range strings.SplitSeq(v, ",") {
			r = strings.TrimSpace(r)
			if err := checkURL(r, schemes...); err != nil {
				return err
			}
			*list = append(*list, r)
		}
		return nil
	}
}

// token sets a shared secret field: empty (unset) or at least
// MinAdminTokenBytes; the error says hint after the lengths, and never the
// value.
func token(field func(*Config) *Secret, hint string) func(*Config, string) error {
	return func(c *Config, v string) error {
		*field(c) = NewSecret(v)
		if v != "" && len(v) < MinAdminTokenBytes {
			return fmt.Errorf("must be at least %d bytes (got %d)%s", MinAdminTokenBytes, len(v), hint)
		}
		return nil
	}
}

// dur sets a duration field that must be >= min.
func dur(field func(*Config) *time.Duration, min time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("invalid duration %q (e.g. 250ms, 30s, 72h)", v)
		}
		if d < min {
			if min == 0 {
				return fmt.Errorf("must not be negative, got %s", d)
			}
			return fmt.Errorf("must be positive, got %s", d)
		}
		*field(c) = d
		return nil
	}
}

// parseInt parses a decimal integer in lo..hi.
func parseInt(v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("must be %d..%d, got %q", lo, hi, v)
	}
	return n, nil
}

// checkHostPort validates a listen address "host:port" (host may be empty,
// port 0..65535).
func checkHostPort(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("invalid address %q (want host:port)", v)
	}
	if _, err := parseInt(port, 0, 65535); err != nil {
		return fmt.Errorf("invalid port in %q (want 0..65535)", v)
	}
	return nil
}

// checkURL validates a server URL: scheme://host[:port] with one of schemes,
// or host[:port] alone.
func checkURL(v string, schemes ...string) error {
	if v == "" {
		return errors.New("empty URL in list")
	}
	s := v
	if !strings.Contains(s, "://") {
		s = schemes[0] + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("invalid URL %q", redactURL(v))
	}
	if u.User != nil {
		return fmt.Errorf("URL %q: credentials in the URL are not accepted (give them in --nats-context, or, for a hub, in leafnodes remotes of --nats-config)", redactURL(v))
	}
	ok := false
	for _, sc := range schemes {
		ok = ok || u.Scheme == sc
	}
	if !ok {
		return fmt.Errorf("URL %q: scheme must be one of %s", redactURL(v), strings.Join(schemes, ", "))
	}
	if p := u.Port(); p != "" {
		if _, err := parseInt(p, 1, 65535); err != nil {
			return fmt.Errorf("URL %q: invalid port", redactURL(v))
		}
	}
	return nil
}

// redactURL hides any user information (user:password@) in a URL for error
// messages.
func redactURL(v string) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		rest, scheme = v, ""
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = Redacted + "@" + rest[at+1:]
	}
	if scheme != "" {
		return scheme + "://" + rest
	}
	return rest
}

// checkPrefix validates a subject prefix (protocol.ValidatePrefix; the
// flag's name says what the error is about).
func checkPrefix(p string) error {
	if err := protocol.ValidatePrefix(p); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "prefix: "))
	}
	return nil
}

// check validates combinations of settings.
func (c *Config) check() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("config: --tls-cert and --tls-key: give both or neither")
	}
	if c.AccessLog && c.LogLevel > slog.LevelInfo {
		return fmt.Errorf("config: --access-log: its lines are at info level, which --log-level %s drops: use info or debug", strings.ToLower(c.LogLevel.String()))
	}
	if c.NATSURL != "" {
		for _, f := range []struct{ name, v string }{
			{"--cluster-listen", c.ClusterListen}, {"--routes", strings.Join(c.Routes, ",")}, {"--leaf-listen", c.LeafListen},
		} {
			if f.v != "" {
				return fmt.Errorf("config: %s: only for the embedded server, not with --nats-url", f.name)
			}
		}
	}
	if !c.Clustered() && len(c.Routes) > 0 {
		return errors.New("config: --routes: needs --cluster-listen")
	}
	if err := c.checkLeaf(); err != nil {
		return err
	}
	if c.ClaimsPersist == PersistAsync && c.Replicas > 1 {
		return fmt.Errorf("config: --claims-persist: async is for R1 file storage only, not with --replicas %d (a replicated claim is as durable as its quorum)", c.Replicas)
	}
	if c.Replicas > 1 && c.NATSURL == "" && !c.Clustered() {
		return fmt.Errorf("config: --replicas: %d replicas need a cluster (--cluster-listen or --nats-url)", c.Replicas)
	}
	return nil
}

// checkLeaf validates the hub and leaf settings (docs/LEAF-MODE.md).
func (c *Config) checkLeaf() error {
	if !c.Leaf() {
		if c.LeafName != "" {
			return errors.New("config: --leaf-name: needs --hub-url")
		}
		if c.SplitShare > 1 {
			return errors.New("config: --split-share: needs --hub-url (only a leaf decides its limits alone)")
		}
		return nil
	}
	switch {
	case c.LeafName == "":
		return errors.New("config: --hub-url: needs --leaf-name (this leaf's name and JetStream domain)")
	case c.NATSURL != "":
		return errors.New("config: --hub-url: a leaf runs the embedded server, not with --nats-url")
	case c.Clustered() || c.Hub():
		return errors.New("config: --hub-url: a leaf is a single node: not with --cluster-listen or --leaf-listen")
	case c.LeafName == c.HubDomain:
		return fmt.Errorf("config: --leaf-name: %q is the hub's JetStream domain: every domain must be unique", c.LeafName)
	}
	return nil
}
