package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/protocol"
)

// runNATSAuthz is `edge nats-authz`: it prints the nats-server
// authorization block of one user with a role (and tenants), for a NATS
// deployment that sluice does not run itself (--nats-url):
//
//	edge nats-authz --user acme-svc --role service --tenants acme,globex
func runNATSAuthz(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nats-authz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	user := fs.String("user", "", "user name (one subject token); its replies come on _INBOX.<user>.")
	role := fs.String("role", "", "role: "+strings.Join(authz.Roles(), ", "))
	tenants := fs.String("tenants", "", "comma-separated tenants (service and consumer)")
	prefix := fs.String("prefix", protocol.DefaultPrefix, "subject prefix (--prefix of the edge)")
	nkey := fs.String("nkey", "", "the user's public nkey (U…) instead of a password")
	shards := fs.Int("shards", 1, "the fleet's shards (--partitions P/S of the edge: S): a consumer reads its tenants' shards' streams")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var ts []string
	if *tenants != "" {
		for _, t := range strings.Split(*tenants, ",") {
			t = strings.TrimSpace(t)
			if !config.ValidName(t) {
				fmt.Fprintf(stderr, "edge nats-authz: --tenants: invalid tenant %q\n", t)
				return 2
			}
			ts = append(ts, t)
		}
	}
	if *shards < 1 || *shards > config.MaxShards {
		fmt.Fprintf(stderr, "edge nats-authz: --shards: must be 1..%d\n", config.MaxShards)
		return 2
	}
	perms, err := authz.ForShards(*role, *user, *prefix, config.HooksStreamName, *shards, ts)
	if err != nil {
		fmt.Fprintln(stderr, "edge nats-authz:", err)
		return 2
	}
	cred := authz.PasswordCredential(*user)
	if *nkey != "" {
		cred = fmt.Sprintf("nkey: %q", *nkey)
	}
	fmt.Fprint(stdout, authz.ConfigBlock([]authz.Entry{{User: *user, Role: *role, Tenants: ts, Credential: cred, Perms: perms}}))
	return 0
}
