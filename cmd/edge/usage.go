package main

import (
	"fmt"
	"io"
)

// commandsUsage follows the flags in `edge -h`: the commands besides
// running a node, like the flags at most config.UsageColumns wide.
const commandsUsage = `
Commands:
  edge [flags]                 run a node (the flags above)
  edge tenants <command> ...   manage tenants and sources through a node's admin API
                               (edge tenants -h)
  edge consumers <command> ... manage a tenant's named consumers of its hooks
                               (edge consumers -h)
  edge nats-authz --user U --role R [--tenants T,...]
                               print the nats-server authorization of a role, for --nats-url
                               (edge nats-authz -h)
  edge healthcheck [--url U]   exit 0 if a node's /readyz answers 200 (container health checks)
  edge --version               the module version and VCS revision of this binary
`

// printCommands writes commandsUsage.
func printCommands(w io.Writer) {
	fmt.Fprint(w, commandsUsage)
}
