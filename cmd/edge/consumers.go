package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/protocol"
)

const consumersUsage = `Usage: edge consumers <command> TENANT [NAME] [flags]

Keeps a tenant's managed consumers through the admin API of a running node
(docs/PROTOCOL.md "Managed consumers", docs/CONSUMING.md). A managed
consumer pushes the tenant's hooks to
sluice.redeliver.<tenant>.consumer.<NAME> (queue group NAME), where the
tenant's consumer-role user reads and acks them. --url and --token as for
edge tenants ($SLUICE_ADMIN_URL, $SLUICE_ADMIN_TOKEN).

Commands:
  list TENANT            the tenant's consumers, with their pending counts
  get TENANT NAME        one consumer: settings, pending, ack pending, redelivered
  put TENANT NAME [flags]
                         create the consumer, or replace its settings
  rm TENANT NAME         delete the consumer
  dead TENANT NAME       its dead letters (hooks it gave up on: max_deliver spent, or terminated)
  redrive TENANT NAME SEQ
                         store dead letter SEQ's hook again (a new hook on its subject) and drop the letter
  purge TENANT NAME      drop every dead letter of the consumer

Put flags: --sources S1,S2 --types T1,T2 (types need sources) --max-deliver N
(0: unlimited) --ack-wait 30s --backoff 1s,10s,1m (needs --max-deliver above
its steps) --max-in-flight N --deliver-new (start at hooks stored from now
on; only when created).
`

// runConsumers is `edge consumers`.
func runConsumers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd, pos, rest, fs, base, token, code, done := adminArgs("edge consumers", consumersUsage, args, stderr)
	if done {
		return code
	}
	sources := fs.String("sources", "", "put: comma-separated sources (none: every source)")
	types := fs.String("types", "", "put: comma-separated event types of the sources")
	maxDeliver := fs.Int("max-deliver", 0, "put: deliveries of a hook at most (0: unlimited)")
	ackWait := fs.Duration("ack-wait", 0, "put: how long a delivery may stay unacked (default 30s)")
	backoff := fs.String("backoff", "", "put: comma-separated waits before each redelivery")
	inFlight := fs.Int("max-in-flight", 0, "put: unacked hooks at most (default 64)")
	deliverNew := fs.Bool("deliver-new", false, "put: start at the hooks stored from now on")
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h after a command, as edge consumers -h
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "edge consumers %s: unexpected argument %q (names come before flags)\n", cmd, fs.Arg(0))
		return 2
	}
	want := map[string]int{"list": 1, "get": 2, "put": 2, "rm": 2, "dead": 2, "redrive": 3, "purge": 2}
	n, ok := want[cmd]
	switch {
	case !ok:
		fmt.Fprintf(stderr, "edge consumers: unknown command %q\n%s", cmd, consumersUsage)
		return 2
	case len(pos) != n:
		fmt.Fprintf(stderr, "edge consumers %s: wrong number of names\n%s", cmd, consumersUsage)
		return 2
	case !config.ValidName(pos[0]):
		fmt.Fprintf(stderr, "edge consumers %s: invalid tenant %q\n", cmd, pos[0])
		return 2
	case n >= 2 && !protocol.ValidConsumerName(pos[1]):
		fmt.Fprintf(stderr, "edge consumers %s: invalid consumer name %q (1..64 bytes of [A-Za-z0-9_-])\n", cmd, pos[1])
		return 2
	}
	c := newAdminCLI("edge consumers", *base, *token, getenv, stdout, stderr)
	if c == nil {
		return 2
	}
	p := "/v1/admin/consumers/" + url.PathEscape(pos[0])
	if n >= 2 {
		p += "/" + pos[1]
	}
	var err error
	switch cmd {
	case "list", "get":
		err = c.call(ctx, "GET", p, nil, 0)
	case "rm":
		err = c.call(ctx, "DELETE", p, nil, 0)
	case "dead":
		err = c.call(ctx, "GET", p+"/dead", nil, 0)
	case "purge":
		err = c.call(ctx, "DELETE", p+"/dead", nil, 0)
	case "redrive":
		err = c.call(ctx, "POST", p+"/dead/"+url.PathEscape(pos[2])+"/redrive", nil, 0)
	case "put":
		body := map[string]any{"max_deliver": *maxDeliver, "max_in_flight": *inFlight, "deliver_new": *deliverNew,
			"ack_wait_ms": ackWait.Milliseconds(), "sources": splitList(*sources), "types": splitList(*types)}
		var steps []int64
		for _, s := range splitList(*backoff) {
			d, perr := time.ParseDuration(s)
			if perr != nil {
				fmt.Fprintf(stderr, "edge consumers put: --backoff: %v\n", perr)
				return 2
			}
			steps = append(steps, d.Milliseconds())
		}
		body["backoff_ms"] = steps
		err = c.call(ctx, "PUT", p, body, 0)
	}
	if err != nil {
		fmt.Fprintln(stderr, "edge consumers "+cmd+":", err)
		return 1
	}
	return 0
}

// splitList splits a comma-separated flag value (nil for "").
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
