// Command natsd runs one embedded nats-server with JetStream
// (natsembed.StartServer, exactly as the edge embeds it) as a process of its
// own, for the fault tests of package faults: they kill -9 it, SIGSTOP it
// and restart it on the same store directory and ports.
//
//	natsd -name s0 -store DIR -listen 127.0.0.1:4222 -config nats.conf \
//	      -cluster-listen 127.0.0.1:6222 -routes 127.0.0.1:6223,127.0.0.1:6224
//
// -config is a nats-server configuration file (the edge's --nats-config:
// here the cluster's name, cluster { name: c }); the flags set what the
// edge's shortcuts set.
//
// Once the server accepts connections it prints "ready <client URL>" on
// standard output; it stops on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-dev/sluice/natsembed"
)

func main() {
	var cfg natsembed.ServerConfig
	var routes, conf string
	flag.StringVar(&cfg.Name, "name", "", "server name (required in a JetStream cluster)")
	flag.StringVar(&cfg.StoreDir, "store", "", "JetStream store directory")
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:-1", "client listener host:port")
	flag.StringVar(&conf, "config", "", "nats-server configuration file")
	flag.StringVar(&cfg.ClusterListen, "cluster-listen", "", "route listener host:port")
	flag.StringVar(&routes, "routes", "", "comma-separated routes host:port")
	flag.Parse()
	if routes != "" {
		cfg.Routes = strings.Split(routes, ",")
	}
	if conf != "" {
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "natsd:", err)
			os.Exit(2)
		}
		cfg.Options = opts
	}
	cfg.ReadyTimeout = 30 * time.Second
	srv, err := natsembed.StartServer(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
	fmt.Println("ready", srv.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Shutdown()
}
