// Package fx wires sluice's packages into a go.uber.org/fx application.
// It is the only package (besides cmd/edge) that imports fx; every wired
// part is usable without it.
package fx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	uberfx "go.uber.org/fx"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
)

// NATS is the connection every part uses, and the embedded server when
// sluice runs one.
type NATS struct {
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Server is the embedded server (nil with --nats-url).
	Server *natsembed.Server
	// Durability is the level in force (config.DurabilityInForce).
	Durability string
	// Mode is what a 2xx waits for (durability.Config.Mode).
	Mode durability.Mode
	// Sync is the barrier the edge and the service wait on before a 2xx
	// (nil: the ack is the promise; the durability package's table).
	// Group is the embedded server's own group sync (nil on a cluster
	// with replicas or at acked): on a single node also the stream
	// record's sync at every level, on an R1 cluster the rounds it serves
	// the other nodes.
	Sync  durability.Syncer
	Group *durability.GroupSync

	// node is what durability.Start started (nil with --nats-url).
	node *durability.Node

	// starting is the start-up's context (Starting; nil: none), which
	// ends the waits of the constructors after ProvideNATS.
	starting context.Context
}

// ProvideNATS starts the embedded server (unless --nats-url is set),
// connects, and waits for JetStream. On stop it drains the connection, then
// shuts the embedded server down.
func ProvideNATS(lc uberfx.Lifecycle, cfg *config.Config, st Starting, reg *Registry, log *slog.Logger) (*NATS, error) {
	ctx, cancel := startContext(st.Ctx, cfg)
	defer cancel()
	dcfg := durabilityConfig(cfg)
	out := &NATS{Durability: dcfg.Level, Mode: dcfg.Mode(), starting: st.Ctx}
	copts := []nats.Option{
		nats.Name("sluice-edge"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrConsumerNotFound) {
				// A drained watcher deleting its ordered consumer that its
				// own Stop deleted already (shutdown): the wanted outcome.
				log.Debug("nats: consumer already gone", "subject", subject)
				return
			}
			// nats.go's default handler writes to stderr, outside the log.
			log.Warn("nats async error", "error", err, "subject", subject)
		}),
	}
	if cfg.NATSURL == "" {
		srvCfg := natsembed.ServerConfig{
			StoreDir:      filepath.Join(cfg.DataDir, "jetstream"),
			Listen:        cfg.NATSListen,
			ClusterListen: cfg.ClusterListen,
			Routes:        cfg.Routes,
			Logger:        log.With("component", "nats-server"),
			SyncAlways:    cfg.ServerSyncAlways(),
		}
		if cfg.NATSFile != nil {
			srvCfg.Options = cfg.NATSFile.Options()
		}
		leafConfig(cfg, &srvCfg)
		for _, u := range cfg.NATSUsers {
			if u.PlainInFile {
				log.Warn("nats_users." + u.Name + ".password is written in --config in plain text: prefer password_env (the password from the environment) or an nkey")
			}
			perms, err := authz.ForShards(u.Role, u.Name, cfg.Prefix, cfg.HooksStream, cfg.Shards, u.Tenants)
			if err != nil {
				return nil, fmt.Errorf("config: nats_users.%s: %w", u.Name, err)
			}
			nu := natsembed.User{
				Name: u.Name, Password: u.Password.Reveal(), NKey: u.NKey, Publish: perms.Publish, Subscribe: perms.Subscribe,
			}
			if r := perms.Responses; r != nil {
				nu.Responses = &server.ResponsePermission{MaxMsgs: r.Max, Expires: r.Expires}
			}
			srvCfg.Users = append(srvCfg.Users, nu)
		}
		if err := os.MkdirAll(srvCfg.StoreDir, 0o750); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		// One process per data dir; released after the server stopped
		// (stop hooks run in reverse order).
		unlock, err := natsembed.LockDir(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		lc.Append(uberfx.StopHook(unlock))
		srv, err := natsembed.StartServer(srvCfg)
		if err != nil {
			unlock()
			return nil, err
		}
		lc.Append(uberfx.StopHook(srv.Shutdown))
		out.Server = srv
		nc, err := srv.Connect(copts...)
		if err != nil {
			srv.Shutdown()
			return nil, fmt.Errorf("connect to embedded server: %w", err)
		}
		out.Conn = nc
		if cfg.Leaf() {
			log.Info("leaf mode: hooks are stored in the local outbox and forwarded to the hub", "leaf", cfg.LeafName, "hub_domain", cfg.HubDomain)
		}
		if u := srv.ClientURL(); u != "" {
			log.Info("embedded nats-server ready", "client_url", u, "store_dir", srvCfg.StoreDir)
		} else {
			log.Info("embedded nats-server ready (in-process only)", "store_dir", srvCfg.StoreDir)
		}
	} else {
		auth, err := clientAuth(cfg)
		if err != nil {
			return nil, err
		}
		nc, err := nats.Connect(cfg.NATSURL, append(copts, auth...)...)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", cfg.NATSURL, err)
		}
		out.Conn = nc
		log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
	}
	lc.Append(uberfx.StopHook(func(ctx context.Context) error {
		done := make(chan struct{})
		out.Conn.SetClosedHandler(func(*nats.Conn) { close(done) })
		if err := out.Conn.Drain(); err != nil {
			out.Conn.Close()
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			out.Conn.Close()
		}
		return nil
	}))
	js, err := jetstream.New(out.Conn)
	if err != nil {
		return nil, err
	}
	out.JS = js
	if err := kvstore.WaitReady(ctx, js); err != nil {
		if errors.Is(err, kvstore.ErrNoJetStream) && cfg.NATSURL != "" {
			return nil, fmt.Errorf("%w on the server at %s (start nats-server with -js, or give its account jetstream: enabled)",
				kvstore.ErrNoJetStream, out.Conn.ConnectedUrlRedacted())
		}
		return nil, fmt.Errorf("jetstream not ready: %w", err)
	}
	if out.Server != nil {
		dcfg.Server, dcfg.Conn, dcfg.JS, dcfg.Registerer, dcfg.Logger = out.Server, out.Conn, js, reg, log
		node, err := durability.Start(ctx, dcfg)
		if err != nil {
			return nil, err
		}
		lc.Append(uberfx.StopHook(node.Stop))
		out.node = node
		out.Group = node.Group
		if node.Barrier != nil {
			out.Sync = node.Barrier
		}
	}
	logMode(cfg, out, log)
	return out, nil
}

// durabilityConfig is the durability package's part of cfg.
func durabilityConfig(cfg *config.Config) durability.Config {
	return durability.Config{
		External: cfg.NATSURL != "", Clustered: cfg.Clustered(),
		Acked: cfg.DurabilityInForce() == config.DurabilityAcked, ServerFsync: cfg.ServerSyncAlways(),
		Level:   cfg.DurabilityInForce(),
		DataDir: cfg.DataDir, AcceptDataLoss: cfg.AcceptDataLoss, Prefix: cfg.Prefix,
		HooksStream: cfg.HooksStream, OutboxStream: hooks.OutboxStream(cfg.HooksStream), Shards: cfg.Shards,
	}
}

// logMode says at start what a 2xx waits for.
func logMode(cfg *config.Config, out *NATS, log *slog.Logger) {
	meaning, warn := out.Mode.Meaning()
	attrs := []any{"durability", out.Durability, "requested", cfg.Durability, "mode", out.Mode}
	if out.node != nil && (!out.Mode.Clustered() || out.Mode == durability.ClusterRounds) {
		attrs = append(attrs, "sync_rounds_find_changes_by", out.node.SyncFinder())
	}
	if warn {
		log.Warn("durability: "+meaning, attrs...)
		return
	}
	log.Info("durability: "+meaning, attrs...)
}

// clientAuth turns --nats-context's credentials and TLS files into
// connection options.
func clientAuth(cfg *config.Config) ([]nats.Option, error) {
	a := cfg.NATS
	var opts []nats.Option
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-context: nkey: %w", err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password.Reveal()))
	case a.Token.Reveal() != "":
		opts = append(opts, nats.Token(a.Token.Reveal()))
	}
	if a.TLSCA != "" || a.TLSCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.TLSCA != "" {
			pem, err := os.ReadFile(a.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("--nats-context: ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("--nats-context: ca: no certificate found")
			}
			tc.RootCAs = pool
		}
		if a.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("--nats-context: cert/key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	if a.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts, nil
}

// storageError makes an error of creating a stream on a store too small
// for it say so plainly: nats-server answers "insufficient storage
// resources available" (API error 10047) when the byte limits reserved by
// the streams exceed what JetStream may use on the data dir's filesystem.
func storageError(n *NATS, err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10047 {
		return err
	}
	if n.Server == nil {
		return fmt.Errorf("the NATS server has no room for sluice's streams (free space on its JetStream store, or raise its max_file_store): %w", err)
	}
	return fmt.Errorf("the data dir's filesystem leaves JetStream %d bytes, not enough for sluice's streams: free space there or use a larger --data-dir: %w", n.Server.MaxStore(), err)
}
