package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	// Logger receives the server's own log at warn level and above (nil: none).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections
	// (default 10 s).
	ReadyTimeout time.Duration
	// MaxStore bounds JetStream file storage in bytes (0: server default).
	MaxStore int64
	// SyncAlways fsyncs every JetStream write before acking it. Without it
	// an acked write survives a process crash but the last ~2 minutes of
	// writes may not survive a power loss (nats-server's sync interval).
	SyncAlways bool
}

// Server is a running embedded nats-server.
type Server struct {
	ns      *server.Server
	cfg     ServerConfig
	storage *storageWatch
}

// StartServer starts an embedded nats-server with JetStream enabled and waits
// until it accepts connections (and, alone, has JetStream ready).
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("%w: StoreDir is required", ErrServerStart)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	if cfg.Listen == "" || cfg.Listen == "off" {
		if cfg.ClusterListen != "" {
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
	if cfg.ClusterListen != "" {
		host, port, err := splitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("kvstore: cluster listen %q: %w", cfg.ClusterListen, err)
		}
		name := cfg.ClusterName
		if name == "" {
			name = "sluice"
		}
		opts.Cluster = server.ClusterOpts{Name: name, Host: host, Port: port}
		if opts.ServerName == "" {
			// A clustered JetStream server needs a name that is unique in
			// the cluster and stable across restarts (its Raft identity).
			hn, _ := os.Hostname()
			if hn == "" {
				hn = "sluice"
			}
			opts.ServerName = fmt.Sprintf("%s-%d", hn, port)
			if port <= 0 {
				opts.ServerName = hn + "-" + nuid.Next()
			}
		}
		if len(cfg.Routes) > 0 {
			var urls []string
			for _, r := range cfg.Routes {
				urls = append(urls, "nats://"+stripScheme(r))
			}
			opts.Routes = server.RoutesFromStr(joinComma(urls))
		}
	}
	switch {
	case cfg.Token != "":
		opts.Authorization = cfg.Token
	case cfg.User != "":
		opts.Username, opts.Password = cfg.User, cfg.Password
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServerStart, err)
	}
	// The server's log is also how a critical write error (no space left)
	// becomes known: watch every line at warn level and above.
	sw := &storageWatch{}
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	ns.SetLoggerV2(&slogAdapter{l: l, watch: sw}, false, false, false)
	ns.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("%w within %s", ErrServerStart, wait)
	}
	return &Server{ns: ns, cfg: cfg, storage: sw}, nil
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
	switch {
	case s.cfg.Token != "":
		base = append(base, nats.Token(s.cfg.Token))
	case s.cfg.User != "":
		base = append(base, nats.UserInfo(s.cfg.User, s.cfg.Password))
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
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any) {
	a.l.Warn(a.watch.see(fmt.Sprintf(format, v...)))
}
func (a *slogAdapter) Fatalf(format string, v ...any) {
	a.l.Error(a.watch.see(fmt.Sprintf(format, v...)))
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	a.l.Error(a.watch.see(fmt.Sprintf(format, v...)))
}
func (a *slogAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) {}
