package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"
)

// ErrServerStart is returned by StartServer when the embedded server does not
// become ready in time.
var ErrServerStart = errors.New("natsembed: embedded nats-server did not start")

// ServerConfig configures an embedded nats-server with JetStream.
// The zero value is a single in-process node with a temporary-less store
// directory: StoreDir must be set.
type ServerConfig struct {
	// Name of the server (unique within a cluster). Default: a generated one.
	Name string
	// StoreDir is where JetStream keeps its files. Required.
	StoreDir string
	// Options are the server's options from a nats-server configuration
	// file (server.ProcessConfigFile; config.NATSFile), nil for none: TLS,
	// cluster, leafnodes, accounts, authorization and JetStream limits
	// come from them. StartServer sets the fields below on top of a copy:
	// JetStream on, its store dir and sync, and each one that is set
	// (ClusterListen and LeafListen only the listener's address, keeping
	// the file's authorization and tls). With users in them (or a bcrypt
	// password), Connect signs in as a generated internal user.
	Options *server.Options
	// Listen is the client listener, "host:port". Empty or "off": no TCP
	// listener at all (in-process connections only). Port 0 or -1 picks a
	// random free port. The default of the edge binary is 127.0.0.1:4222:
	// loopback only unless the operator says otherwise.
	Listen string
	// ClusterName, ClusterListen and Routes join this server to others as a
	// nats-server cluster. ClusterListen "host:port" (port -1: random).
	ClusterName   string
	ClusterListen string
	Routes        []string
	// Auth required of clients of this server (all optional, at most one kind).
	User, Password, Token string
	// Users are users confined by subject permissions (see package authz
	// for sluice's roles). With any, User/Password and NKeySeedFile are
	// users without restrictions, and Connect signs in as an internal
	// unrestricted user when neither is set. Not with Token.
	Users []User
	// NKeySeedFile is the path of an nkey user seed: clients must sign in
	// with that nkey (its public key is the server's user); Connect does.
	NKeySeedFile string
	// TLSCert and TLSKey serve TLS on the client listener (clients must use
	// it; in-process connections need not). With TLSCA, clients must also
	// present a certificate signed by it.
	TLSCert, TLSKey, TLSCA string
	// ClusterToken, when set, is required of every route (user
	// RouteUser, password ClusterToken), and given to the routes this
	// server dials.
	ClusterToken string
	// ClusterTLSCert, ClusterTLSKey and ClusterTLSCA make routes use mutual
	// TLS: each side presents its certificate, verified with ClusterTLSCA.
	ClusterTLSCert, ClusterTLSKey, ClusterTLSCA string
	// JetStreamDomain is the server's JetStream domain ("": none). A hub
	// serving leaves has one, and so has every leaf (its name): leaf
	// connections between servers of different domains carry no JetStream
	// API or KV traffic (nats-server denies $JS.API.>, $KV.> and $OBJ.>),
	// so each side keeps its own streams and buckets.
	JetStreamDomain string
	// LeafListen "host:port" accepts leaf-node connections (a hub serving
	// leaves). With LeafToken they must sign in as LeafUser with it; with
	// LeafTLSCert/LeafTLSKey they must use TLS, and with LeafTLSCA also
	// present a certificate signed by it.
	LeafListen string
	// LeafToken is the secret of the leaf connections: required by
	// LeafListen, presented to LeafRemotes.
	LeafToken string
	// LeafRemotes are the hub's leaf-node URLs (nats-leaf://host:port or
	// tls://host:port): this server connects to the hub as a leaf node
	// (a leaf), verifying it with LeafTLSCA and presenting LeafTLSCert.
	LeafRemotes []string
	// LeafDeny are subjects that cross the leaf connection to LeafRemotes
	// in neither direction; LeafDenyImports more that do not come in.
	LeafDeny, LeafDenyImports []string
	// Mappings are subject mappings of the server's account, from → to
	// (nats-server's "mappings"; they apply to leaf connections' messages
	// too): a hub maps its leaves' owner subjects (quota.HubMapping).
	Mappings map[string]string
	// LeafTLSCert, LeafTLSKey and LeafTLSCA are the leaf connection's TLS
	// files (see LeafListen and LeafRemotes).
	LeafTLSCert, LeafTLSKey, LeafTLSCA string
	// LeafReconnect is how often a lost leaf connection is tried again
	// (default 1 s).
	LeafReconnect time.Duration
	// Logger receives the server's own log at warn level and above (nil: none).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections
	// (default 10 s).
	ReadyTimeout time.Duration
	// SyncInterval is how often the server fsyncs its store files in the
	// background (nats-server's sync_interval; 0: its default, 2 minutes).
	SyncInterval time.Duration
	// MaxStore bounds JetStream file storage in bytes (0: server default).
	MaxStore int64
	// SyncAlways fsyncs every JetStream write before acking it. Without it
	// an acked write survives a process crash but the last ~2 minutes of
	// writes may not survive a power loss (nats-server's sync interval).
	SyncAlways bool
}

// User is a client of the server with a password or an nkey (public key),
// allowed to publish and subscribe only to the listed subjects.
type User struct {
	Name, Password, NKey string
	Publish, Subscribe   []string
	// Responses, when set, is the user's allow_responses.
	Responses *server.ResponsePermission
}

// RouteUser is the user name routes authenticate as (with ClusterToken).
const RouteUser = "sluice-route"

// LeafUser is the user name leaf connections authenticate as (with
// LeafToken).
const LeafUser = "sluice-leaf"

// Server is a running embedded nats-server.
type Server struct {
	ns      *server.Server
	cfg     ServerConfig
	storage *storageWatch
	// signIn is how Connect signs in (nil: no authorization).
	signIn nats.Option
	// started is when StartServer began (protocol.SyncReply.UptimeNS).
	started time.Time
}

// StartServer starts an embedded nats-server with JetStream enabled and waits
// until it accepts connections (and, alone, has JetStream ready).
func StartServer(cfg ServerConfig) (*Server, error) {
	started := time.Now()
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: StoreDir is required", ErrServerStart)
	}
	opts := &server.Options{}
	if cfg.Options != nil {
		opts = cfg.Options.Clone()
	}
	if cfg.Name != "" {
		opts.ServerName = cfg.Name
	}
	opts.JetStream, opts.StoreDir, opts.NoSigs = true, cfg.StoreDir, true
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	}
	if cfg.ClusterListen != "" {
		host, port, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("kvstore: cluster listen %q: %w", cfg.ClusterListen, err)
		}
		opts.Cluster.Host, opts.Cluster.Port = host, port
	}
	if cfg.Listen == "" || cfg.Listen == "off" {
		if opts.Cluster.Port != 0 {
			// nats-server only starts routing once its client listener is
			// up: a clustered server gets a random loopback client port.
			opts.Host, opts.Port = "127.0.0.1", -1
		} else {
			opts.DontListen = true
		}
	} else {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("kvstore: listen %q: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	if err := clusterOptions(opts, cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerStart, err)
	}
	if err := leafOptions(opts, cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerStart, err)
	}
	signIn, err := authOptions(opts, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerStart, err)
	}
	if cfg.TLSCert != "" || cfg.TLSCA != "" {
		if cfg.TLSCert == "" {
			return nil, fmt.Errorf("%w: client TLS needs a certificate and its key (a CA alone verifies nothing)", ErrServerStart)
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: cfg.TLSCA != "",
		})
		if err != nil {
			return nil, fmt.Errorf("%w: client TLS: %w", ErrServerStart, err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify, opts.TLSTimeout = tc, true, cfg.TLSCA != "", 2
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerStart, err)
	}
	for from, to := range cfg.Mappings {
		if err := ns.GlobalAccount().AddMapping(from, to); err != nil {
			return nil, fmt.Errorf("%w: mapping %s -> %s: %w", ErrServerStart, from, to, err)
		}
	}
	// The server's log is also how a critical write error (no space left)
	// becomes known: watch every line at warn level and above.
	sw := &storageWatch{}
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	adapter := &slogAdapter{l: l, watch: sw}
	ns.SetLoggerV2(adapter, false, false, false)
	ns.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	// A server that cannot start (a port in use, JetStream refused) says
	// so with Fatalf and stays up without listening: fail at once with its
	// reason instead of waiting the whole timeout.
	for deadline := time.Now().Add(wait); ; {
		if f := adapter.fatal.Load(); f != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("%w: %s", ErrServerStart, startCause(*f))
		}
		if ns.ReadyForConnections(20 * time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("%w within %s", ErrServerStart, wait)
		}
	}
	if len(opts.Accounts) > 0 && !ns.GlobalAccount().JetStreamEnabled() {
		// The file's accounts are for its own users; sluice's streams stay
		// in the global account, with JetStream within the server's limits.
		if err := ns.GlobalAccount().EnableJetStream(map[string]server.JetStreamAccountLimits{"": {
			MaxMemory: -1, MaxStore: -1, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1, MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1,
		}}, nil); err != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("%w: JetStream for sluice's (global) account: %w", ErrServerStart, err)
		}
	}
	return &Server{ns: ns, cfg: cfg, storage: sw, signIn: signIn, started: started}, nil
}

// StoreDir is where JetStream keeps the server's files (ServerConfig.StoreDir).
func (s *Server) StoreDir() string { return s.cfg.StoreDir }

// Name is the server's name.
func (s *Server) Name() string { return s.ns.Name() }

// Started is when StartServer began (protocol.SyncReply.UptimeNS).
func (s *Server) Started() time.Time { return s.started }

// Leads are the streams of names this server leads now (an R1 stream:
// holds).
func (s *Server) Leads(names []string) []string {
	acc := s.ns.GlobalAccount()
	var out []string
	for _, n := range names {
		if acc.JetStreamIsStreamLeader(n) {
			out = append(out, n)
		}
	}
	return out
}

// StreamSeqs returns every stream of the server's account and its last
// sequence.
func (s *Server) StreamSeqs() (map[string]uint64, error) {
	info, err := s.ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, a := range info.AccountDetails {
		for _, st := range a.Streams {
			out[st.Name] = st.State.LastSeq
		}
	}
	return out, nil
}

// clusterOptions completes a clustered server's options (a cluster
// listener from ClusterListen or the file): its cluster name (the file's,
// or "sluice"), its server name, ClusterRoutes (signed in as the cluster's
// user when they name none) and the route token and TLS.
func clusterOptions(opts *server.Options, cfg ServerConfig) error {
	if opts.Cluster.Port == 0 {
		return nil
	}
	if cfg.ClusterName != "" {
		opts.Cluster.Name = cfg.ClusterName
	}
	if opts.Cluster.Name == "" {
		opts.Cluster.Name = "sluice"
	}
	if opts.ServerName == "" {
		// A clustered JetStream server needs a name that is unique in
		// the cluster and stable across restarts (its Raft identity).
		hn, _ := os.Hostname()
		if hn == "" {
			hn = "sluice"
		}
		opts.ServerName = fmt.Sprintf("%s-%d", hn, opts.Cluster.Port)
		if opts.Cluster.Port <= 0 {
			opts.ServerName = hn + "-" + nuid.Next()
		}
	}
	// A tag naming the server, so that a stream can be placed on it
	// (PlacementTag: the shards' R1 streams, spread over the servers).
	opts.Tags = append(opts.Tags, PlacementTag(opts.ServerName))
	if cfg.ClusterToken != "" {
		opts.Cluster.Username, opts.Cluster.Password = RouteUser, cfg.ClusterToken
	}
	if len(cfg.Routes) > 0 {
		var urls []string
		for _, r := range cfg.Routes {
			urls = append(urls, "nats://"+stripScheme(r))
		}
		routes := server.RoutesFromStr(joinComma(urls))
		for _, u := range routes {
			if opts.Cluster.Username != "" {
				u.User = url.UserPassword(opts.Cluster.Username, opts.Cluster.Password)
			}
		}
		opts.Routes = append(opts.Routes, routes...)
	}
	if cfg.ClusterTLSCert != "" || cfg.ClusterTLSCA != "" {
		if cfg.ClusterTLSCert == "" || cfg.ClusterTLSCA == "" {
			return errors.New("route TLS needs a certificate, its key and a CA")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: cfg.ClusterTLSCert, KeyFile: cfg.ClusterTLSKey, CaFile: cfg.ClusterTLSCA, Verify: true,
		})
		if err != nil {
			return fmt.Errorf("route TLS: %w", err)
		}
		// Routes dial each other: the CA also verifies the server side
		// (as nats-server's own cluster tls block does).
		tc.RootCAs = tc.ClientCAs
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 2
	}
	return nil
}

// leafOptions sets the JetStream domain, the leaf-node listener of a hub
// and the remote of a leaf.
func leafOptions(opts *server.Options, cfg ServerConfig) error {
	if cfg.JetStreamDomain != "" {
		opts.JetStreamDomain = cfg.JetStreamDomain
	}
	if cfg.LeafListen != "" {
		host, port, err := splitHostPort(cfg.LeafListen)
		if err != nil {
			return fmt.Errorf("leaf listen %q: %w", cfg.LeafListen, err)
		}
		opts.LeafNode.Host, opts.LeafNode.Port = host, port
		if cfg.LeafToken != "" {
			opts.LeafNode.Username, opts.LeafNode.Password = LeafUser, cfg.LeafToken
		}
		if cfg.LeafTLSCert != "" {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
				CertFile: cfg.LeafTLSCert, KeyFile: cfg.LeafTLSKey, CaFile: cfg.LeafTLSCA, Verify: cfg.LeafTLSCA != "",
			})
			if err != nil {
				return fmt.Errorf("leaf TLS: %w", err)
			}
			opts.LeafNode.TLSConfig, opts.LeafNode.TLSTimeout = tc, 2
		}
	}
	for _, rem := range opts.LeafNode.Remotes {
		// The file's remotes (a leaf's, to its hub) keep sluice's deny
		// lists too.
		rem.DenyExports = append(rem.DenyExports, cfg.LeafDeny...)
		rem.DenyImports = append(rem.DenyImports, append(slices.Clone(cfg.LeafDeny), cfg.LeafDenyImports...)...)
	}
	if opts.LeafNode.ReconnectInterval <= 0 {
		opts.LeafNode.ReconnectInterval = cfg.LeafReconnect
		if opts.LeafNode.ReconnectInterval <= 0 {
			opts.LeafNode.ReconnectInterval = time.Second
		}
	}
	if len(cfg.LeafRemotes) == 0 {
		return nil
	}
	rem := &server.RemoteLeafOpts{
		DenyExports: cfg.LeafDeny,
		DenyImports: append(slices.Clone(cfg.LeafDeny), cfg.LeafDenyImports...),
	}
	for _, r := range cfg.LeafRemotes {
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("leaf remote %q: invalid URL", stripScheme(r))
		}
		if cfg.LeafToken != "" {
			u.User = url.UserPassword(LeafUser, cfg.LeafToken)
		}
		rem.URLs = append(rem.URLs, u)
	}
	if cfg.LeafTLSCA != "" || cfg.LeafTLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.LeafTLSCert, KeyFile: cfg.LeafTLSKey, CaFile: cfg.LeafTLSCA})
		if err != nil {
			return fmt.Errorf("leaf TLS: %w", err)
		}
		// The CA verifies the hub (GenTLSConfig loads it for clients).
		tc.RootCAs = tc.ClientCAs
		rem.TLS, rem.TLSConfig, rem.TLSTimeout = true, tc, 2
	}
	opts.LeafNode.Remotes = append(opts.LeafNode.Remotes, rem)
	return nil
}

// LeafConnected reports whether this server has a leaf-node connection
// (a leaf: to its hub).
func (s *Server) LeafConnected() bool { return s.ns.NumLeafNodes() > 0 }

// authOptions sets the server's authorization from cfg on top of what the
// configuration file set, and returns how Connect signs in: the token, the
// plain user, the nkey, or — with users (cfg.Users or the file's) — a
// generated unrestricted internal user added to them.
func authOptions(opts *server.Options, cfg ServerConfig) (nats.Option, error) {
	var signIn nats.Option
	switch {
	case cfg.Token != "":
		opts.Authorization = cfg.Token
	case cfg.User != "":
		opts.Username, opts.Password = cfg.User, cfg.Password
		signIn = nats.UserInfo(cfg.User, cfg.Password)
	case cfg.NKeySeedFile != "":
		pub, opt, err := nkeyUser(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey: %w", err)
		}
		opts.Nkeys, signIn = append(opts.Nkeys, &server.NkeyUser{Nkey: pub}), opt
	}
	bcrypt := strings.HasPrefix(opts.Password, "$2")
	if len(cfg.Users) == 0 && len(opts.Users) == 0 && len(opts.Nkeys) == 0 && !bcrypt {
		switch {
		case opts.Authorization != "":
			return nats.Token(opts.Authorization), nil
		case opts.Username != "":
			return nats.UserInfo(opts.Username, opts.Password), nil
		}
		return nil, nil
	}
	if opts.Authorization != "" {
		return nil, errors.New("users and a token cannot be combined")
	}
	if opts.Username != "" {
		opts.Users = append(opts.Users, &server.User{Username: opts.Username, Password: opts.Password})
		opts.Username, opts.Password = "", ""
	}
	if signIn == nil {
		internal := &server.User{Username: "sluice-node-" + nuid.Next(), Password: nuid.Next() + nuid.Next()}
		opts.Users = append(opts.Users, internal)
		signIn = nats.UserInfo(internal.Username, internal.Password)
	}
	for _, u := range cfg.Users {
		perms := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: u.Publish},
			Subscribe: &server.SubjectPermission{Allow: u.Subscribe},
			Response:  u.Responses,
		}
		switch {
		case u.NKey != "" && u.Password == "":
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: perms})
		case u.NKey == "" && u.Password != "" && u.Name != "":
			opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: perms})
		default:
			return nil, fmt.Errorf("user %q: a name with a password, or an nkey", u.Name)
		}
	}
	return signIn, nil
}

// nkeyUser reads an nkey user seed file: its public key and the client
// option that signs in with it.
func nkeyUser(path string) (string, nats.Option, error) {
	seed, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(seed)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", nil, fmt.Errorf("%s: not a user nkey seed (want SU…)", path)
	}
	kp.Wipe()
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return "", nil, err
	}
	return pub, opt, nil
}

// NATS is the underlying server, for tests and advanced wiring.
func (s *Server) NATS() *server.Server { return s.ns }

// ClientURL is the URL of the client listener ("" when there is none).
func (s *Server) ClientURL() string {
	if s.cfg.Listen == "" || s.cfg.Listen == "off" {
		return ""
	}
	return s.ns.ClientURL()
}

// ClusterAddr is the route listener address ("" without clustering).
func (s *Server) ClusterAddr() string {
	if a := s.ns.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Connect opens a client connection to this server: in-process (no TCP)
// always works, even when the server has no listener.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.InProcessServer(s.ns), nats.Name("sluice")}
	if s.signIn != nil {
		base = append(base, s.signIn)
	}
	return nats.Connect("", append(base, opts...)...)
}

// Shutdown stops the server and waits until it has stopped. Safe to call
// more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", ps, err)
	}
	if port == 0 {
		port = -1 // nats-server: -1 means random
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return host, port, nil
}

func stripScheme(u string) string {
	for _, p := range []string{"nats://", "nats-route://", "tls://"} {
		if len(u) > len(p) && u[:len(p)] == p {
			return u[len(p):]
		}
	}
	return u
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// slogAdapter routes nats-server's logger into slog, and shows every line
// at warn level and above to the storage watch.
type slogAdapter struct {
	l     *slog.Logger
	watch *storageWatch
	// fatal is the server's first Fatalf line (it does not exit when
	// embedded; StartServer fails with it).
	fatal atomic.Pointer[string]
}

// addrInUse finds a listener's address in a bind failure.
var addrInUse = regexp.MustCompile(`listen tcp (\S*?):(\d+): bind: address already in use`)

// startCause is a Fatalf line as the reason a start failed: a port in use
// is said first, as an operator searches for it.
func startCause(line string) string {
	if m := addrInUse.FindStringSubmatch(line); m != nil {
		return fmt.Sprintf("port %s in use (%s:%s: address already in use; another nats-server or edge?)", m[2], m[1], m[2])
	}
	return line
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any) {
	line := a.watch.see(fmt.Sprintf(format, v...))
	if strings.HasPrefix(line, "Plaintext passwords detected") {
		// nats-server means passwords written in its config file, and
		// counts sluice's in-memory users among them (the
		// generated internal one, password_env); sluice warns itself about
		// a password written in its own file (cmd/edge, nats_users).
		a.l.Debug(line)
		return
	}
	a.l.Warn(line)
}
func (a *slogAdapter) Fatalf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	a.fatal.CompareAndSwap(nil, &line)
	a.l.Error(a.watch.see(line))
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	a.l.Error(a.watch.see(fmt.Sprintf(format, v...)))
}
func (a *slogAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) {}

// PlacementTag is the tag every clustered embedded server carries, naming
// it: a stream whose Placement has the tag PlacementTag(name) is placed on
// server name (nats-server lowercases tags).
func PlacementTag(serverName string) string { return "sluice-server:" + strings.ToLower(serverName) }

// ClusterPeers are the names of the servers of the JetStream cluster this
// server knows (itself included), sorted, those the meta group reports
// offline only withOffline; nil when it is not clustered.
func (s *Server) ClusterPeers(withOffline bool) []string {
	jsz, err := s.ns.Jsz(&server.JSzOptions{})
	if err != nil || jsz.Meta == nil {
		return nil
	}
	names := []string{s.ns.Name()}
	if jsz.Meta.Leader != "" {
		names = append(names, jsz.Meta.Leader)
	}
	for _, p := range jsz.Meta.Replicas {
		if p != nil && p.Name != "" && (withOffline || !p.Offline) {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
