package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/config"
)

// runHealthcheck is `edge healthcheck`: GET /readyz of a node and exit 0 on
// 200, 1 otherwise (the reply's first line on stderr). It is the container
// image's HEALTHCHECK, which has no shell or curl (FROM scratch). The node
// is the one this environment configures: --url, else http://<the
// $SLUICE_HTTP_ADDR host, 127.0.0.1 if unspecified>:<its port>/readyz.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "readiness URL (default: /readyz at $"+config.EnvName("http-addr")+", else 127.0.0.1:8080)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edge healthcheck: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	target := *url
	if target == "" {
		var err error
		if target, err = readyzURL(getenv(config.EnvName("http-addr"))); err != nil {
			fmt.Fprintln(stderr, "edge healthcheck:", err)
			return 2
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintln(stderr, "edge healthcheck:", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "edge healthcheck:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "edge healthcheck: %s: %s %s\n", target, resp.Status, line)
		return 1
	}
	fmt.Fprintln(stdout, line)
	return 0
}

// readyzURL is the /readyz URL of a node listening on addr (its
// --http-addr; "" for the default): an unspecified host is this host.
func readyzURL(addr string) (string, error) {
	if addr == "" {
		addr, _ = config.Default("http-addr")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("$%s: %w", config.EnvName("http-addr"), err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
