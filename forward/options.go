package forward

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/protocol"
)

// protocol.ErrInvalidOption is wrapped by the error NewRoute returns for an option
// with a bad argument (docs/DESIGN.md "Options").
var errInvalidOption = fmt.Errorf("forward: %w", protocol.ErrInvalidOption)

// RouteOption configures NewRoute.
type RouteOption interface{ applyRoute(*routeConfig) error }

type routeConfig struct {
	partitions int
	log        *slog.Logger
	reg        prometheus.Registerer
}

type routeOption func(*routeConfig) error

func (o routeOption) applyRoute(c *routeConfig) error { return o(c) }

// WithPartitions sets the leaf's partition count, compared with the hub
// fleet's (default protocol.DefaultPartitions; at least 1). It must be the
// count the leaf's quota Router routes with.
func WithPartitions(n int) RouteOption {
	return routeOption(option.Positive(errInvalidOption, "partitions", n, func(c *routeConfig, n int) { c.partitions = n }))
}

// WithLogger sets the logger of the route's changes (nil or absent:
// discard).
func WithLogger(l *slog.Logger) RouteOption {
	return routeOption(option.Logger(l, func(c *routeConfig) **slog.Logger { return &c.log }))
}

// WithRegisterer registers the route's gauge sluice_edge_hub_quota on reg
// (nil or absent: kept, not exported).
func WithRegisterer(reg prometheus.Registerer) RouteOption {
	return routeOption(func(c *routeConfig) error { c.reg = reg; return nil })
}

func newRouteConfig(opts []RouteOption) (routeConfig, error) {
	c := routeConfig{partitions: protocol.DefaultPartitions, log: slog.New(slog.DiscardHandler)}
	err := option.Apply(&c, opts, RouteOption.applyRoute)
	return c, err
}
