package main

// The CPU account (issue 49 item 1): the CPU profiles of every node of a
// row (--scale-profile) summed and split into components by rules on the
// functions of each sample's stack and on the pprof labels nats-server
// sets on its stream goroutines. Each sample goes to the first rule that
// matches it; its CPU is divided by the hooks (or messages) the row
// stored, so every component reads as CPU per stored hook of the whole
// fleet. docs/BENCHMARKS.md "The account of a hook's CPU" lists the rules
// as accountRules says them.

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// accountRule is one component: a sample belongs to it when any frame of
// its stack (inlined ones included) contains one of Frames and, if Stream
// is set, its "stream" label is one Stream accepts. Rules are tried in
// order: the first that matches takes the sample.
type accountRule struct {
	Component string
	Frames    []string
	Stream    func(label string) bool // nil: any label or none
}

const (
	sluicePkg = "github.com/sluice-dev/sluice/"
	natsSrv   = "github.com/nats-io/nats-server/v2/server."
)

func claimsStream(s string) bool { return strings.HasPrefix(s, "KV_") && strings.Contains(s, "claims") }
func hooksStream(s string) bool {
	return strings.HasPrefix(s, "HOOKS") || strings.HasPrefix(s, "BENCH")
}
func otherStream(s string) bool { return s != "" && !claimsStream(s) && !hooksStream(s) }

// Components of the account, in the order the table prints them.
const (
	compHTTP       = "HTTP (net/http, the handler's own code)"
	compAdmit      = "verification and admission"
	compHit        = "the quota hit and its hops (router, coalescer, owner, GCRA)"
	compClaims     = "claim writes, the edge's side (claims, kvstore)"
	compStore      = "the hook's store, the edge's side"
	compWait       = "what the 2xx waits for (group sync, rounds, barrier)"
	compNATSClient = "the edge's NATS client (nats.go loops, write acks)"
	compEvents     = "lifecycle events"
	compBackground = "background (leases, heartbeats, watchers, record, shard mover)"
	compSluiceRest = "sluice, other"
	compSrvClaims  = "nats-server: claims streams' writes (ingest, file store)"
	compSrvHooks   = "nats-server: hooks streams' writes (ingest, file store)"
	compRaftClaims = "nats-server: Raft of the claims streams (log, WAL, apply)"
	compRaftHooks  = "nats-server: Raft of the hooks streams (log, WAL, apply)"
	compRaftOther  = "nats-server: Raft, other (meta, proposals on connections)"
	compSrvOther   = "nats-server: other streams (leases, …), background"
	compSrvWrite   = "nats-server: stream writes on connections (unlabelled)"
	compRoutes     = "nats-server: route connections (hops and Raft traffic)"
	compClients    = "nats-server: client connections (parse, deliver)"
	compSrvRest    = "nats-server, other (JetStream API, timers, internal sends)"
	compGC         = "Go runtime: GC"
	compRuntime    = "Go runtime: scheduler, other"
	compUnknown    = "unattributed"
)

// raftFrames are nats-server's replication: the Raft node, the stream
// monitor that applies committed entries on every replica.
var raftFrames = []string{natsSrv + "(*raft).", natsSrv + "(*jetStream).monitorStream", natsSrv + "(*jetStream).applyStreamEntries",
	natsSrv + "(*jetStream).monitorCluster", natsSrv + "(*jetStream).monitorConsumer", natsSrv + "(*jetStream).applyMetaEntries"}

// streamFrames are a stream's own write path: its ingest loop, the
// message's processing and the file store.
var streamFrames = []string{natsSrv + "(*stream).", natsSrv + "(*fileStore).", natsSrv + "(*msgBlock)."}

// accountRules are the rules, in order (the first match wins).
var accountRules = []accountRule{
	// sluice's own code, most specific first: a stack holding the barrier
	// or a claim write is that, whatever HTTP handler called it.
	{compWait, []string{sluicePkg + "httpapi.(*Handler).durable", sluicePkg + "kvstore.(*GroupSync)", sluicePkg + "kvstore.SyncWith",
		sluicePkg + "kvstore.SyncThen", sluicePkg + "durability.", sluicePkg + "natsembed.(*storeSync)", sluicePkg + "natsembed.(*Server).Sync"}, nil},
	{compClaims, []string{sluicePkg + "claims.", sluicePkg + "quota/owner.(*claimJob)", sluicePkg + "quota/owner.(*Worker).collectClaims",
		sluicePkg + "quota/owner.(*Worker).startClaims"}, nil},
	{compEvents, []string{sluicePkg + "events.(*Publisher)", sluicePkg + "events.(*Settler)", sluicePkg + "httpapi.(*Lifecycle"}, nil},
	{compBackground, []string{sluicePkg + "quota/internal/lease.", sluicePkg + "placement.", sluicePkg + "natsembed.(*Recorder)",
		sluicePkg + "natsembed.WriteRecord", sluicePkg + "kvstore.(*Follow", sluicePkg + "kvstore.follow", sluicePkg + "events.(*Expiry",
		sluicePkg + "events.(*expiry", sluicePkg + "tenants.(*Registry).watch", sluicePkg + "quota/owner.(*Worker).heartbeat",
		sluicePkg + "quota/owner.(*tenure", sluicePkg + "natsembed.(*nodeSync"}, nil},
	{compStore, []string{sluicePkg + "httpapi.(*HookStore)", sluicePkg + "httpapi.(*Handler).store", sluicePkg + "hooks.",
		sluicePkg + "kvstore.(*Writer)"}, nil},
	{compHit, []string{sluicePkg + "quota.", sluicePkg + "quota/", sluicePkg + "gcra.", sluicePkg + "forward."}, nil},
	{compAdmit, []string{sluicePkg + "httpapi.(*Handler).resolveSource", sluicePkg + "httpapi.(*Handler).checkAccess",
		sluicePkg + "httpapi.(*Handler).answerCRC", sluicePkg + "httpapi.(*Handler).readBody", sluicePkg + "httpapi.(*Handler).storeWritable",
		sluicePkg + "httpapi.(*Handler).verify", sluicePkg + "httpapi.(*Handler).answerChallenge", sluicePkg + "httpapi.(*Handler).claimNonce",
		sluicePkg + "httpapi.(*Handler).admit", sluicePkg + "httpapi.(*Handler).hitRequest", sluicePkg + "httpapi.(*Handler).answerHit",
		sluicePkg + "httpapi.(*Handler).EffectiveLimits", sluicePkg + "httpapi.(*Handler).keyReused", sluicePkg + "webhook.",
		sluicePkg + "tenants.", sluicePkg + "authz.", sluicePkg + "cooldown."}, nil},
	{compHTTP, []string{"net/http.", sluicePkg + "httpapi."}, nil},
	{compNATSClient, []string{"github.com/nats-io/nats%2ego.", "github.com/nats-io/nats.go.", sluicePkg + "kvstore.(*acker)"}, nil},
	{compSluiceRest, []string{sluicePkg}, nil},
	// nats-server: its stream goroutines carry a "stream" label.
	{compRaftClaims, raftFrames, claimsStream},
	{compRaftHooks, raftFrames, hooksStream},
	{compSrvOther, []string{natsSrv}, otherStream},
	{compSrvClaims, streamFrames, claimsStream},
	{compSrvHooks, streamFrames, hooksStream},
	{compRaftOther, raftFrames, nil},
	{compSrvWrite, streamFrames, nil},
	{compRoutes, []string{natsSrv + "(*Server).createRoute", natsSrv + "(*client).processInboundRoutedMsg", natsSrv + "(*client).processRoute"}, nil},
	{compClients, []string{natsSrv + "(*Server).createClient", natsSrv + "(*client)."}, nil},
	{compSrvRest, []string{natsSrv}, nil},
	{compGC, []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}, nil},
	{compRuntime, []string{"runtime.", "runtime/", "syscall.", "time."}, nil},
}

// componentOrder is every component, in the order of the rules (a
// component named by more than one rule appears once).
func componentOrder() []string {
	var out []string
	for _, r := range accountRules {
		if !slices.Contains(out, r.Component) {
			out = append(out, r.Component)
		}
	}
	return append(out, compUnknown)
}

// classify names the component of one stack (leaf first, as pprof keeps
// it) with its "stream" label ("" when none).
func classify(frames []string, stream string) string {
	for _, r := range accountRules {
		if r.Stream != nil && !r.Stream(stream) {
			continue
		}
		for _, f := range frames {
			for _, p := range r.Frames {
				if strings.Contains(f, p) {
					return r.Component
				}
			}
		}
	}
	return compUnknown
}

// cpuProfileAccount is what the profiles of one row sampled, by component.
type cpuProfileAccount struct {
	SampledSec  float64            `json:"sampled_cpu_s"`
	PerUnitUs   map[string]float64 `json:"per_unit_us"` // µs per stored hook (or message), by component
	SampledUs   float64            `json:"sampled_per_unit_us"`
	Units       uint64             `json:"units"`
	Profiles    int                `json:"profiles"`
	Unsupported string             `json:"error,omitempty"`
}

// accountProfiles reads the CPU profiles in files and accounts their
// samples per unit stored (hooks answered 202, or messages acked).
func accountProfiles(files []string, units uint64) (cpuProfileAccount, error) {
	a := cpuProfileAccount{PerUnitUs: map[string]float64{}, Units: units, Profiles: len(files)}
	byComp := map[string]int64{}
	var total int64
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return a, err
		}
		p, err := profile.Parse(f)
		f.Close()
		if err != nil {
			return a, fmt.Errorf("%s: %w", file, err)
		}
		vi := -1
		for i, st := range p.SampleType {
			if st.Type == "cpu" && st.Unit == "nanoseconds" {
				vi = i
			}
		}
		if vi < 0 {
			return a, fmt.Errorf("%s: no cpu/nanoseconds sample type", file)
		}
		for _, s := range p.Sample {
			var frames []string
			for _, loc := range s.Location {
				for _, l := range loc.Line {
					if l.Function != nil {
						frames = append(frames, l.Function.Name)
					}
				}
			}
			stream := ""
			if v := s.Label["stream"]; len(v) > 0 {
				stream = v[0]
			}
			ns := s.Value[vi]
			byComp[classify(frames, stream)] += ns
			total += ns
		}
	}
	a.SampledSec = float64(total) / 1e9
	if units > 0 {
		for c, ns := range byComp {
			a.PerUnitUs[c] = float64(ns) / 1e3 / float64(units)
		}
		a.SampledUs = float64(total) / 1e3 / float64(units)
	}
	return a, nil
}

// accountColumn is one column of the account table.
type accountColumn struct {
	name    string
	procUs  float64 // CPU per unit by /proc
	account *cpuProfileAccount
}

// printAccount writes the account of the profiled scale and substrate
// rows as one Markdown table: components down, rows across.
func printAccount(w io.Writer, scale []scaleRow, sub []substrateRow) {
	var cols []accountColumn
	for i := range scale {
		r := &scale[i]
		if r.Account != nil {
			name := fmt.Sprintf("run %d: %d node(s) R%d, %s", r.Run, r.Nodes, r.Replicas, quotaText(r.QuotaCores))
			cols = append(cols, accountColumn{name, r.FleetCPUPerHookUs, r.Account})
		}
	}
	for i := range sub {
		r := &sub[i]
		if r.Account != nil {
			cols = append(cols, accountColumn{fmt.Sprintf("run %d: nats-server %s", r.Run, r.Spec), r.CPUPerMsgUs, r.Account})
		}
	}
	if len(cols) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== CPU account: µs of fleet CPU per stored hook (substrate: per acked message), by component (pprof samples of every node, summed) ==")
	fmt.Fprintln(w)
	head := "| component"
	sep := "|---"
	for _, c := range cols {
		head += " | " + c.name
		sep += "|---"
	}
	fmt.Fprintln(w, head+" |")
	fmt.Fprintln(w, sep+"|")
	for _, comp := range componentOrder() {
		seen := false
		line := "| " + comp
		for _, c := range cols {
			v := c.account.PerUnitUs[comp]
			seen = seen || v >= 0.5
			line += " | " + fmt.Sprintf("%.0f", v)
		}
		if seen {
			fmt.Fprintln(w, line+" |")
		}
	}
	for _, t := range []struct {
		name string
		v    func(c accountColumn) float64
	}{
		{"**sampled (pprof)**", func(c accountColumn) float64 { return c.account.SampledUs }},
		{"**by /proc (utime + stime)**", func(c accountColumn) float64 { return c.procUs }},
	} {
		line := "| " + t.name
		for _, c := range cols {
			line += fmt.Sprintf(" | **%.0f**", t.v(c))
		}
		fmt.Fprintln(w, line+" |")
	}
}
