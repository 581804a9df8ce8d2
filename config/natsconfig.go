package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
)

// NATSFile is the --nats-config file, a standard nats-server configuration
// file parsed by nats-server's own parser: its options are the embedded
// server's, and sluice sets on top of them only what it owns, refusing a
// file that says otherwise: JetStream on, its store <--data-dir>/jetstream,
// its sync following --durability; listen, cluster listen and routes,
// leafnodes listen and remotes given by their flag (--nats-listen,
// --cluster-listen, --routes, --leaf-listen, --hub-url) or the file, not
// both (--nats-listen's default yields); a leaf's server name and domain
// its --leaf-name, a hub's domain HubDomainName. Everything else (tls,
// authorization, accounts, JetStream limits, monitoring) is the file's.
//
// Its fields are unexported: the options hold the file's passwords.
type NATSFile struct {
	path string
	o    *server.Options
	// keys are the keys the file sets (lower case): top level, and
	// "<block>.<key>" for the jetstream, cluster and leafnodes blocks.
	keys map[string]bool
}

// sets reports whether the file sets one of keys.
func (f *NATSFile) sets(keys ...string) bool {
	for _, k := range keys {
		if f != nil && f.keys[k] {
			return true
		}
	}
	return false
}

// Path is the file (--nats-config).
func (f *NATSFile) Path() string { return f.path }

// Options are the server options the file gives (natsembed copies them).
func (f *NATSFile) Options() *server.Options { return f.o }

// opts are the file's options (empty without a file).
func (f *NATSFile) opts() *server.Options {
	if f == nil {
		return &server.Options{}
	}
	return f.o
}

func (f *NATSFile) clusterPort() bool { return f.opts().Cluster.Port != 0 }
func (f *NATSFile) leafPort() bool    { return f.opts().LeafNode.Port != 0 }
func (f *NATSFile) remotes() bool     { return len(f.opts().LeafNode.Remotes) > 0 }

// loadNATSFile parses path with nats-server's parser; its errors name the
// file, line and column.
func loadNATSFile(path string) (*NATSFile, error) {
	raw, err := conf.ParseFile(path)
	if err != nil {
		return nil, err
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, err
	}
	f := &NATSFile{path: path, o: opts, keys: map[string]bool{}}
	blocks := map[string]string{"jetstream": "jetstream", "js": "jetstream", "cluster": "cluster", "leafnodes": "leafnodes", "leaf": "leafnodes"}
	for k, v := range raw {
		k = strings.ToLower(k)
		f.keys[k] = true
		if b, ok := blocks[k]; ok {
			f.keys[b] = true
			if m, ok := v.(map[string]any); ok {
				for bk := range m {
					f.keys[b+"."+strings.ToLower(bk)] = true
				}
			}
		}
	}
	return f, nil
}

// applyNATSFile loads --nats-config, takes from it what sluice's checks
// need (the listeners, routes and remotes) and refuses what contradicts
// sluice's own settings (see NATSFile). listenGiven: --nats-listen was set
// (flag, environment or --config), not its default.
func (c *Config) applyNATSFile(listenGiven bool) error {
	if c.NATSConfig == "" {
		return nil
	}
	if c.NATSURL != "" {
		return errors.New("config: --nats-config: only for the embedded server, not with --nats-url")
	}
	f, err := loadNATSFile(c.NATSConfig)
	if err != nil {
		return fmt.Errorf("config: --nats-config %s: %w", c.NATSConfig, err)
	}
	c.NATSFile = f
	o := f.o
	bad := func(setting, why string) error {
		return fmt.Errorf("config: --nats-config %s: %s: %s", c.NATSConfig, setting, why)
	}
	both := func(setting, flag string) error {
		return bad(setting, "set both here and by "+flag+": keep one")
	}
	if f.sets("jetstream") && !o.JetStream {
		return bad("jetstream", "disables JetStream, which sluice stores everything in (remove it, or give jetstream {…} its limits)")
	}
	if f.sets("store_dir", "storedir", "jetstream.store_dir", "jetstream.store", "jetstream.storedir") {
		if want := filepath.Join(c.DataDir, "jetstream"); absPath(o.StoreDir) != absPath(want) {
			return bad("jetstream store_dir", fmt.Sprintf("%s is not sluice's store %s (JetStream lives under --data-dir, next to its lock and record): remove store_dir", o.StoreDir, want))
		}
	}
	if f.sets("listen", "port", "host", "net") {
		if listenGiven {
			return both("listen", "--nats-listen")
		}
		c.NATSListen = hostPort(o.Host, o.Port, server.DEFAULT_PORT)
	}
	switch {
	case o.Cluster.Port != 0 && c.ClusterListen != "":
		return both("cluster listen", "--cluster-listen")
	case len(o.Routes) > 0 && len(c.Routes) > 0:
		return both("cluster routes", "--routes")
	case o.LeafNode.Port != 0 && c.LeafListen != "":
		return both("leafnodes listen", "--leaf-listen")
	case len(o.LeafNode.Remotes) > 0 && len(c.HubURLs) > 0:
		return both("leafnodes remotes", "--hub-url")
	}
	switch d := o.JetStreamDomain; {
	case c.Leaf() && d != "" && d != c.LeafName:
		return bad("jetstream domain", fmt.Sprintf("a leaf's JetStream domain is its --leaf-name %q: remove domain", c.LeafName))
	case c.Leaf() && o.ServerName != "" && o.ServerName != c.LeafName:
		return bad("server_name", fmt.Sprintf("a leaf's server name is its --leaf-name %q: remove server_name", c.LeafName))
	case c.Hub() && d != "" && d != HubDomainName:
		return bad("jetstream domain", fmt.Sprintf("a hub's JetStream domain is %q (its leaves address it so): remove domain", HubDomainName))
	}
	return nil
}

// checkNATSFileSync refuses a sync_interval in the file that contradicts
// --durability (once the cluster is known: ServerSyncAlways).
func (c *Config) checkNATSFileSync() error {
	f := c.NATSFile
	if !f.sets("jetstream.sync_interval", "jetstream.sync") {
		return nil
	}
	switch always := c.ServerSyncAlways(); {
	case f.o.SyncAlways && !always:
		return fmt.Errorf("config: --nats-config %s: jetstream sync_interval: always contradicts --durability %s: use --durability sync-always (sluice sets the server's sync itself)", f.path, c.Durability)
	case !f.o.SyncAlways && always:
		return fmt.Errorf("config: --nats-config %s: jetstream sync_interval: %s contradicts --durability %s, which has nats-server fsync every write: remove sync_interval, or use --durability acked", f.path, f.o.SyncInterval, c.Durability)
	}
	return nil
}

// clusterListen and leafListen are the listeners in force (the flag's or
// the file's), "" for none.
func (c *Config) clusterListen() string {
	if o := c.NATSFile.opts(); o.Cluster.Port != 0 {
		return hostPort(o.Cluster.Host, o.Cluster.Port, 0)
	}
	return c.ClusterListen
}

func (c *Config) leafListen() string {
	if o := c.NATSFile.opts(); o.LeafNode.Port != 0 {
		return hostPort(o.LeafNode.Host, o.LeafNode.Port, 0)
	}
	return c.LeafListen
}

// clientAuth: the file requires clients of the embedded server to
// authenticate (users, nkeys, a token, accounts' users, or verified client
// certificates).
func (f *NATSFile) clientAuth() bool {
	o := f.opts()
	return o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 || len(o.TrustedOperators) > 0 ||
		o.AuthCallout != nil || (o.TLSConfig != nil && o.TLSVerify)
}

// clusterAuth: routes must authenticate (a user or verified TLS).
func (f *NATSFile) clusterAuth() bool {
	o := f.opts().Cluster
	return o.Username != "" || verified(o.TLSConfig)
}

// leafAuth: leaf connections must authenticate.
func (f *NATSFile) leafAuth() bool {
	o := f.opts().LeafNode
	return o.Username != "" || o.Nkey != "" || len(o.Users) > 0 || verified(o.TLSConfig)
}

func verified(tc *tls.Config) bool {
	return tc != nil && tc.ClientAuth == tls.RequireAndVerifyClientCert
}

// hostPort is nats-server's host and port as host:port (nats-server's
// defaults for an empty host; port 0: def).
func hostPort(host string, port, def int) string {
	if host == "" {
		host = server.DEFAULT_HOST
	}
	if port == 0 {
		port = def
	}
	return net.JoinHostPort(host, strconv.Itoa(max(port, 0)))
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	return a
}
