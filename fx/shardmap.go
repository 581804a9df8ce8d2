package fx

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"

	uberfx "go.uber.org/fx"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/kvstore"
)

// shardMap is GET /v1/shards on a node of its own embedded server (nil
// elsewhere: a leaf's or an external server's node leads no shard), which
// answers its advertised address (advertise) on httpapi.NodeSubject until
// it stops.
func shardMap(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, out *HTTP, log *slog.Logger) (http.Handler, error) {
	if n.Server == nil || s.LeafClaims != nil {
		return nil, nil
	}
	var claims []string
	for _, b := range s.ClaimsBuckets {
		claims = append(claims, kvstore.StreamName(b.Name()))
	}
	m, err := httpapi.NewShardMap(httpapi.ShardMapConfig{
		Conn: n.Conn, JS: n.JS, Prefix: cfg.Prefix, Shards: cfg.Shards,
		Hooks: hooks.HooksStreams(cfg.HooksStream, cfg.Shards), Claims: claims,
		Advertise: func() string {
			bound := ""
			if a := out.Addr.Load(); a != nil {
				bound = *a
			}
			return advertise(cfg.HTTPAdvertise, bound)
		},
		Logger: log.With("component", "shardmap"),
	})
	if err != nil {
		return nil, err
	}
	lc.Append(uberfx.StopHook(m.Stop))
	return m, nil
}

// advertise is the HTTP address a node gives for itself: flag when set,
// else the bound listener's with the host's name for an unspecified host
// ("" before the listener is bound).
func advertise(flag, bound string) string {
	if flag != "" || bound == "" {
		return flag
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return net.JoinHostPort(host, port)
}
