// Package config loads the configuration of cmd/edge from command-line flags,
// environment variables (--some-flag = SLUICE_SOME_FLAG, empty counts as
// unset) and a YAML file (top-level key some_flag, plus allow_unknown,
// defaults and tenants: testdata/edge.yaml), flag over environment over file
// over default, as PROTOCOL.md's "Command line and configuration" states, and
// resolves a tenant's source and limits for the edge.
//
// Every error names the flag (and where its value came from) or the file
// field by its full path, e.g. "config: --partitions: must be 1..4096".
// Secrets never appear when a Config is printed, logged or marshalled (see
// Secret). No globals, no NATS; a loaded Config is immutable and safe for
// concurrent use.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/protocol"
)

// EnvPrefix prefixes every flag's environment twin.
const EnvPrefix = "SLUICE_"

// Config is the configuration of one edge process. The fields set from
// flags keep their flag's name in their documentation.
type Config struct {
	// File is the YAML file read (--config), "" for none.
	File string

	// HTTPAddr is the HTTP listener, host:port (--http-addr).
	HTTPAddr string
	// HTTPAdvertise is the HTTP address GET /v1/shards names for this
	// node (--http-advertise; "": derived from the listener's).
	HTTPAdvertise string
	// HTTPMaxConns bounds the open HTTP connections: ConnsPerHookSlot
	// per --max-inflight-hooks, at least MinHTTPConns.
	HTTPMaxConns int
	// MaxInFlightHooks bounds the hooks served at once; beyond it 503
	// overloaded at once (--max-inflight-hooks).
	MaxInFlightHooks int
	// TLSCert and TLSKey enable HTTPS (--tls-cert, --tls-key; both or none).
	TLSCert, TLSKey string

	// DataDir holds the embedded server's JetStream storage (--data-dir).
	DataDir string
	// NATSConfig is the embedded server's nats-server configuration file
	// (--nats-config), NATSFile what it holds (nil without one); see
	// natsconfig.go for what it may set and what sluice keeps.
	NATSConfig string
	NATSFile   *NATSFile
	// NATSListen is the embedded server's client listener, host:port; "" when
	// --nats-listen is off (in-process connections only). The file's
	// listen, when --nats-listen is not given.
	NATSListen string
	// NATSURL, when set, makes the edge a client of an existing NATS
	// deployment instead of running the embedded server (--nats-url;
	// comma-separated server URLs; or the url of --nats-context).
	NATSURL string
	// NATSContext is a NATS CLI context (--nats-context: a file, or the
	// name of one of the nats CLI's saved contexts), NATS its credentials
	// and TLS files for NATSURL.
	NATSContext string
	NATS        NATSAuth
	// ClusterListen and Routes make the embedded server join other sluice
	// nodes as a nats-server cluster (--cluster-listen, --routes; or the
	// file's cluster block: Clustered).
	ClusterListen string
	Routes        []string

	// LeafListen is the embedded server's leaf-node listener for leaves
	// (--leaf-listen, a hub; or the file's leafnodes listen: Hub). The
	// hub's JetStream domain is HubDomain.
	LeafListen string
	// HubURLs make this node a leaf (--hub-url, nats-leaf://host:port; or
	// the file's leafnodes remotes: Leaf): its embedded server is a leaf
	// node of the hub with the JetStream domain LeafName (--leaf-name);
	// hooks are stored in a local outbox stream and forwarded to the hub's
	// HooksStream, whose JetStream domain is HubDomain.
	HubURLs   []string
	LeafName  string
	HubDomain string
	// SplitShare is the share of each limit a leaf applies while it
	// decides its limits itself (--split-share n: 1/n of each limit).
	SplitShare int

	// Prefix is the subject prefix (--prefix).
	Prefix string
	// Partitions is the number of quota partitions (--partitions P/S: P).
	Partitions int
	// Shards is the number of shards (--partitions P/S: S, default 1): the
	// fleet's hooks streams and claims buckets (protocol.Shard).
	Shards int
	// Replicas is the replica count of every bucket and stream (--replicas).
	Replicas int
	// AdminToken enables the admin API when set (--admin-token).
	AdminToken Secret
	// SecretsKeyFile holds the keys that seal the source secrets stored in
	// the tenants bucket (--secrets-key-file; see package tenants).
	SecretsKeyFile string

	// TrustedProxies are the peers whose ClientIPHeader names the client
	// (--trusted-proxies); ClientIPHeader is that header (--client-ip-header).
	TrustedProxies []netip.Prefix
	ClientIPHeader string

	// ReplayCapacity bounds the replay store (--replay-capacity).
	ReplayCapacity int64
	// StoreTimeout is the budget of one call to the fleet store
	// (--store-timeout).
	StoreTimeout time.Duration
	// PendingTTL and DedupeTTL are the pending and committed claim TTLs
	// (--pending-ttl, --dedupe-ttl).
	PendingTTL, DedupeTTL time.Duration

	// HooksStream names the stream of accepted hooks (HooksStreamName).
	HooksStream string
	// HooksMaxAge and HooksMaxBytes bound the hooks stream (--hooks-max-age,
	// 0 = forever; --hooks-max-bytes, 0 = unlimited). A full stream refuses
	// new hooks (503); it never drops stored ones early.
	HooksMaxAge   time.Duration
	HooksMaxBytes int64
	// Durability is what a 2xx waits for (--durability; docs/RELIABILITY
	// "Durability levels"): DurabilitySynced (the default), DurabilityAcked
	// or DurabilitySyncAlways. DurabilityInForce is the level a node gets.
	Durability string
	// AcceptDataLoss starts a node whose data dir lacks streams or
	// messages its record says were durable (--accept-data-loss).
	AcceptDataLoss bool
	// ClaimExpiryEvents publishes claim.expired events (--claim-expiry-events):
	// the claims bucket keeps expiry markers and an expiry watcher reads
	// them. Off (the default), the bucket has per-key TTLs without markers
	// and no watcher runs.
	ClaimExpiryEvents bool
	// ClaimsPersist is the claims bucket's persist mode (--claims-persist):
	// PersistSync (the default) or PersistAsync (R1 only: the server acks
	// a claim write before it reaches the file).
	ClaimsPersist string

	// LogLevel is the slog level (--log-level: debug, info, warn, error).
	LogLevel slog.Level
	// LogFormat is "text" or "json" (--log-format).
	LogFormat string
	// AccessLog logs one line per answered hook at info level
	// (--access-log; off by default).
	AccessLog bool

	// AllowUnknown accepts tenants and sources the file does not list, with
	// Defaults (allow_unknown; when not set, true only if the file lists no
	// tenant). A listed tenant may decide for its own sources (see
	// Config.AllowsUnlisted).
	AllowUnknown bool
	// OpenQuickstart is true when AllowUnknown comes from the absence of
	// tenants rather than from the file: the edge then accepts any tenant
	// and source, which the configuration only allows with a loopback
	// --http-addr, and the edge says so in its start-up log.
	OpenQuickstart bool
	// Defaults are the limits of tenants without their own and the settings
	// of unlisted sources.
	Defaults Defaults
	// Tenants are the tenants listed in the file, by name.
	Tenants map[string]Tenant

	// NATSUsers are the embedded server's users with their roles
	// (nats_users), sorted by name.
	NATSUsers []NATSUser

	bodyLimitSet bool // defaults.source.max_body_bytes is set in the file
}

// Values of --durability.
const (
	// DurabilitySynced: a 2xx after a group sync made its writes durable
	// (one round of fdatasync shared by every caller whose acks came
	// before it). The embedded single node only.
	DurabilitySynced = "synced"
	// DurabilityAcked: a 2xx after JetStream's ack (the writes are in the
	// page cache of the server, or of a quorum's).
	DurabilityAcked = "acked"
	// DurabilitySyncAlways: the embedded nats-server fsyncs every write
	// before its ack (its sync always; each Raft append in a cluster).
	DurabilitySyncAlways = "sync-always"
)

// DurabilityLevels returns the values of --durability.
func DurabilityLevels() []string {
	return []string{DurabilitySynced, DurabilityAcked, DurabilitySyncAlways}
}

// DurabilityInForce is the level a 2xx gets: Durability, except that
// with --nats-url it is acked (sluice cannot sync an external server's
// disk: the operator configures its sync, docs/RELIABILITY.md "Durability
// levels"). On an embedded cluster synced is in force as well: at R1 by
// the cluster's group sync (every server holding a write syncs it),
// with replicas by the servers (ServerSyncAlways): each Raft append is
// fsynced before it counts toward the quorum that acks a write.
func (c *Config) DurabilityInForce() string {
	switch {
	case c.NATSURL != "":
		return DurabilityAcked
	case c.Durability == "":
		return DurabilitySynced
	}
	return c.Durability
}

// ServerSyncAlways says whether the embedded nats-server fsyncs every
// write (its jetstream sync_interval: always): at sync-always, and at
// synced on a cluster with --replicas above 1, where a quorum's fsynced
// Raft appends are what a 2xx waits for. A single node's synced, and an
// R1 cluster's, is sluice's own group sync.
func (c *Config) ServerSyncAlways() bool {
	if c.NATSURL != "" {
		return false
	}
	switch c.DurabilityInForce() {
	case DurabilitySyncAlways:
		return true
	case DurabilitySynced:
		return c.Clustered() && c.Replicas > 1
	}
	return false
}

// Names sluice decides (no flag).
const (
	// HooksStreamName is the stream of accepted hooks (a leaf's outbox is
	// HOOKS_OUTBOX).
	HooksStreamName = protocol.HooksStreamName
	// HubDomainName is a hub's JetStream domain: its leaves address it by
	// it, and no edge may be named so.
	HubDomainName = "hub"
	// ConnsPerHookSlot is how many HTTP connections may be open per
	// --max-inflight-hooks, at least MinHTTPConns: idle keep-alive senders
	// beyond the hooks being served, bounded (beyond it they are shed 503).
	ConnsPerHookSlot = 8
	MinHTTPConns     = 4096
)

// Clustered says whether the embedded server joins a cluster
// (--cluster-listen, or the cluster block of --nats-config).
func (c *Config) Clustered() bool { return c.ClusterListen != "" || c.NATSFile.clusterPort() }

// Hub says whether the embedded server serves leaves (--leaf-listen, or a
// leafnodes listen in --nats-config).
func (c *Config) Hub() bool { return c.LeafListen != "" || c.NATSFile.leafPort() }

// Leaf says whether this node runs in leaf mode (--hub-url, or leafnodes
// remotes in --nats-config): its embedded server joins its hub as a NATS
// leaf node and forwards its hooks there.
func (c *Config) Leaf() bool { return len(c.HubURLs) > 0 || c.NATSFile.remotes() }

// Values of --claims-persist.
const (
	PersistSync  = "sync"
	PersistAsync = "async"
)

// NATSAuth are the credentials and TLS files of a client of --nats-url,
// from --nats-context. At most one of Creds, User/Password, Token and NKey
// is set; TLSCert and TLSKey go together.
type NATSAuth struct {
	Creds    string // path of a .creds file (user JWT and nkey seed)
	User     string
	Password Secret
	Token    Secret
	NKey     string // path of an nkey seed file
	TLSCA    string // CA bundle to verify the server
	TLSCert  string // client certificate
	TLSKey   string // key of TLSCert
	TLSFirst bool   // TLS handshake before the server's INFO
}

// NATSUser is a user of the embedded server with a role (see package
// authz): a password or an nkey public key.
type NATSUser struct {
	Name     string
	Role     string
	Tenants  []string
	Password Secret
	NKey     string // public user nkey (U…)
	// PlainInFile: the password is written in the file (password:), not
	// taken from the environment (password_env).
	PlainInFile bool
}

// Parse reads the configuration from args (without the program name), the
// environment through getenv (nil: no environment) and the --config file.
// With -h or --help it writes the usage to usage (nil: discarded) and
// returns an error wrapping flag.ErrHelp.
func Parse(args []string, getenv func(string) string, usage io.Writer) (*Config, error) {
	return parse(args, getenv, usage, os.ReadFile)
}

// boolFlag is a bool setting on the command line: bare (true) or
// =true/=false; the value is checked with the others (strconv.ParseBool).
type boolFlag struct {
	v   string
	set bool
}

func (b *boolFlag) String() string { return b.v }

func (b *boolFlag) Set(v string) error { b.v, b.set = v, true; return nil }

// IsBoolFlag lets the flag package accept the bare form.
func (b *boolFlag) IsBoolFlag() bool { return true }

// parse is Parse with the file reader injected (tests and fuzzing).
func parse(args []string, getenv func(string) string, usage io.Writer, readFile func(string) ([]byte, error)) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if usage == nil {
		usage = io.Discard
	}
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, s := range settings {
		if s.kind == "bool" {
			fs.Var(&boolFlag{}, s.name, s.usage) // --accept-data-loss, --accept-data-loss=false
		} else {
			fs.String(s.name, "", s.usage)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintUsage(usage)
			return nil, fmt.Errorf("config: %w", flag.ErrHelp)
		}
		return nil, fmt.Errorf("config: %w (see -h)", err)
	}
	if fs.NArg() > 0 {
		if i := len(args) - fs.NArg(); i > 0 {
			if f := fs.Lookup(strings.TrimLeft(args[i-1], "-")); f != nil {
				if b, ok := f.Value.(*boolFlag); ok && b.set {
					return nil, fmt.Errorf("config: unexpected argument %q: a switch takes no separate value; write %s or %s=%s", fs.Arg(0), args[i-1], args[i-1], fs.Arg(0))
				}
			}
		}
		return nil, fmt.Errorf("config: unexpected argument %q (every setting is a --flag)", fs.Arg(0))
	}

	// Layer the values: default < file < environment < flag.
	vals := make(map[string]value, len(settings))
	for _, s := range settings {
		vals[s.name] = value{v: s.def, origin: originDefault}
	}
	for _, s := range settings {
		if v := getenv(EnvName(s.name)); v != "" {
			vals[s.name] = value{v: v, origin: originEnv}
		}
	}
	fs.Visit(func(f *flag.Flag) {
		vals[f.Name] = value{v: f.Value.String(), origin: originFlag}
	})

	cfg := &Config{}
	var file *fileConfig
	if path := vals["config"].v; path != "" {
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: --config%s: %w", vals["config"].from("config"), err)
		}
		f, fileVals, err := parseFile(data)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		file = f
		for name, v := range fileVals {
			if vals[name].origin == originDefault {
				vals[name] = value{v: v, origin: originFile, file: path}
			}
		}
	}
	for _, s := range settings {
		v := vals[s.name]
		if err := s.set(cfg, v.v); err != nil {
			return nil, fmt.Errorf("config: --%s%s: %w", s.name, v.from(s.name), err)
		}
	}
	cfg.HooksStream, cfg.HubDomain = HooksStreamName, HubDomainName
	cfg.HTTPMaxConns = max(MinHTTPConns, ConnsPerHookSlot*cfg.MaxInFlightHooks)
	if err := cfg.loadNATSContext(vals["nats-context"].from("nats-context"), getenv); err != nil {
		return nil, err
	}
	if err := cfg.applyNATSFile(vals["nats-listen"].origin != originDefault); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := cfg.checkNATSFileSync(); err != nil {
		return nil, err
	}
	if err := cfg.resolveFile(file, getenv); err != nil {
		return nil, err
	}
	if err := cfg.checkEmbeddedSecurity(); err != nil {
		return nil, err
	}
	if cfg.Clustered() && len(cfg.Routes) == 0 && len(cfg.NATSFile.opts().Routes) == 0 {
		// nats-server's own words, 10 s later: "JetStream cluster requires
		// configured routes or solicited leafnode for the system account".
		return nil, fmt.Errorf("config: --cluster-listen%s needs --routes (the cluster addresses of the nodes, e.g. "+
			"--routes nats-route://10.0.0.1:6222,nats-route://10.0.0.2:6222,nats-route://10.0.0.3:6222); a single node needs no --cluster-listen",
			vals["cluster-listen"].from("cluster-listen"))
	}
	if cfg.OpenQuickstart && !IsLoopback(cfg.HTTPAddr) {
		return nil, fmt.Errorf("config: --http-addr%s: %s is not a loopback address and no tenants are listed: "+
			"list tenants in --config (or set allow_unknown: true there to accept any tenant and source)",
			vals["http-addr"].from("http-addr"), cfg.HTTPAddr)
	}
	return cfg, nil
}

// IsLoopback reports whether the host of addr (host:port) is a loopback
// address or "localhost"; an empty host (all interfaces) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// EnvName returns the environment twin of a flag: "http-addr" ->
// "SLUICE_HTTP_ADDR".
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// FileKey returns the YAML key of a flag: "http-addr" -> "http_addr".
func FileKey(flagName string) string {
	return strings.ReplaceAll(flagName, "-", "_")
}

// Flags returns the names of all flags (without dashes), in usage order.
func Flags() []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.name
	}
	return out
}

// Default returns the default of a flag (without dashes) and whether the
// flag exists.
func Default(flagName string) (string, bool) {
	for _, s := range settings {
		if s.name == flagName {
			return s.def, true
		}
	}
	return "", false
}

// PrintUsage writes the usage: every flag with its default and its
// environment twin.
func PrintUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: edge [flags]

sluice webhook edge. Every flag --some-flag has an environment twin
SLUICE_SOME_FLAG and a key some_flag in the --config YAML file. A flag wins
over the environment, which wins over the file, which wins over the default.

Flags:
`)
	// Names in one column, what each does after them, wrapped to
	// UsageColumns with its environment twin last.
	indent := 0
	for _, s := range settings {
		indent = max(indent, len("  --"+s.name+" "+s.kind+"  "))
	}
	for _, s := range settings {
		words := strings.Fields(s.usage)
		if s.def != "" {
			words = append(words, fmt.Sprintf("(default %q)", s.def)) // kept on one line
		}
		words = append(words, "$"+EnvName(s.name))
		head := fmt.Sprintf("  --%s %s", s.name, s.kind)
		for i, l := range wrapWords(words, UsageColumns-indent) {
			if i > 0 {
				head = ""
			}
			fmt.Fprintf(w, "%-*s%s\n", indent, head, l)
		}
	}
}

// UsageColumns is the widest line PrintUsage writes (a terminal wraps
// longer ones mid-word).
const UsageColumns = 100

// wrapWords joins words into lines of at most width runes (a word longer
// than width gets a line of its own).
func wrapWords(words []string, width int) []string {
	var lines []string
	line := ""
	for _, word := range words {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// value is one setting's raw value and where it came from.
type value struct {
	v      string
	origin int
	file   string
}

const (
	originDefault = iota
	originFile
	originEnv
	originFlag
)

// from describes where a value came from, for error messages ("" for the
// command line).
func (v value) from(name string) string {
	switch v.origin {
	case originEnv:
		return " (from $" + EnvName(name) + ")"
	case originFile:
		return " (from " + FileKey(name) + " in " + v.file + ")"
	case originDefault:
		return " (default)"
	}
	return ""
}

// sortedKeys returns m's keys in order (deterministic errors).
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
