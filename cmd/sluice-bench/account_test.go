package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
)

// TestClassify holds the rules to stacks as the nodes' profiles show them
// (leaf first): each lands in the component the docs say.
func TestClassify(t *testing.T) {
	srv := "github.com/nats-io/nats-server/v2/server."
	sl := "github.com/sluice-dev/sluice/"
	cases := []struct {
		stack  []string
		stream string
		want   string
	}{
		{[]string{"syscall.Syscall", "net.(*conn).Write", "net/http.(*response).finishRequest", "net/http.(*conn).serve"}, "", compHTTP},
		{[]string{"runtime.memmove", sl + "httpapi.(*Handler).readBody", sl + "httpapi.(*Handler).serveHook", "net/http.(*conn).serve"}, "", compAdmit},
		{[]string{"runtime.mallocgc", sl + "quota.(*Router).viaFrame", sl + "quota.(*Fleet).Hit", sl + "httpapi.(*Handler).admit", "net/http.(*conn).serve"}, "", compHit},
		{[]string{"syscall.write", "github.com/nats-io/nats%2ego.(*Conn).publish", sl + "kvstore.(*acker).write", sl + "claims.(*KV).Claim",
			sl + "quota.(*Fleet).localHit", sl + "quota.(*Fleet).Hit", sl + "httpapi.(*Handler).admit", "net/http.(*conn).serve"}, "", compClaims},
		{[]string{sl + "claims.(*KV).SettleOwn", sl + "events.(*observedStore).SettleOwn", sl + "httpapi.(*Handler).settleClaim", sl + "httpapi.(*Handler).store"}, "", compClaims},
		{[]string{sl + "kvstore.(*acker).start", sl + "httpapi.(*HookStore).put", sl + "httpapi.(*HookStore).Store", sl + "httpapi.(*Handler).store"}, "", compStore},
		{[]string{"runtime.chanrecv", sl + "kvstore.(*GroupSync).Sync", sl + "httpapi.(*Handler).durable", sl + "httpapi.(*Handler).store"}, "", compWait},
		{[]string{"golang.org/x/sys/unix.Fdatasync", sl + "natsembed.fsyncFile", sl + "natsembed.(*storeSync).syncPath"}, "", compWait},
		{[]string{"golang.org/x/sys/unix.Fdatasync", sl + "natsembed.fsyncFile", sl + "natsembed.WriteRecord", sl + "natsembed.(*Recorder).loop"}, "", compBackground},
		{[]string{sl + "quota/internal/lease.(*Loop).apply", sl + "quota/internal/lease.(*Loop).Run"}, "", compBackground},
		{[]string{sl + "quota/owner.(*Worker).decideItems", sl + "quota/owner.(*Worker).serveFrame", "github.com/nats-io/nats%2ego.(*Conn).waitForMsgs"}, "", compHit},
		{[]string{sl + "kvstore.parseAck", sl + "kvstore.(*acker).handle", "github.com/nats-io/nats%2ego.(*Conn).waitForMsgs"}, "", compNATSClient},
		{[]string{"syscall.Fsync", srv + "(*raft).storeToWAL", srv + "(*raft).processAppendEntry", srv + "(*raft).runAsFollower", srv + "(*raft).run"}, "HOOKS_2", compRaftHooks},
		{[]string{srv + "(*fileStore).StoreRawMsg", srv + "(*stream).processJetStreamMsg", srv + "(*jetStream).applyStreamEntries", srv + "(*jetStream).monitorStream"}, "KV_sluice_claims_1", compRaftClaims},
		{[]string{srv + "(*fileStore).StoreMsg", srv + "(*stream).processJetStreamMsg", srv + "(*stream).internalLoop"}, "KV_sluice_claims", compSrvClaims},
		{[]string{srv + "(*fileStore).StoreMsg", srv + "(*stream).processJetStreamMsg", srv + "(*stream).internalLoop"}, "HOOKS", compSrvHooks},
		{[]string{srv + "(*fileStore).StoreMsg", srv + "(*stream).processJetStreamMsg", srv + "(*stream).internalLoop"}, "BENCH_1", compSrvHooks},
		{[]string{srv + "(*raft).resetElect", srv + "(*raft).run"}, "KV_sluice_leases", compSrvOther},
		{[]string{srv + "(*raft).Propose", srv + "(*stream).processClusteredInboundMsg", srv + "(*client).processInboundClientMsg", srv + "(*client).readLoop", srv + "(*Server).createClientEx.func1"}, "", compRaftOther},
		{[]string{"net.(*Buffers).WriteTo", srv + "(*client).flushOutbound", srv + "(*client).writeLoop", srv + "(*Server).createRoute.func2"}, "", compRoutes},
		{[]string{srv + "(*client).parse", srv + "(*client).readLoop", srv + "(*Server).createClientEx.func1"}, "", compClients},
		{[]string{srv + "(*sendq).internalLoop", srv + "(*Server).startGoRoutine.func1"}, "", compSrvRest},
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, "", compGC},
		{[]string{"runtime.futex", "runtime.findRunnable", "runtime.schedule", "runtime.mcall"}, "", compRuntime},
		{[]string{"syscall.RawSyscall6"}, "", compRuntime},
		{[]string{"main.main"}, "", compUnknown},
	}
	for _, c := range cases {
		if got := classify(c.stack, c.stream); got != c.want {
			t.Errorf("%v (stream %q): %q, want %q", c.stack, c.stream, got, c.want)
		}
	}
}

// TestAccountProfiles writes two CPU profiles (two nodes) and reads their
// account back: each sample's CPU is counted once, in its component, per
// unit stored, and the "stream" label splits nats-server's work.
func TestAccountProfiles(t *testing.T) {
	dir := t.TempDir()
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	serve := fn(1, "net/http.(*conn).serve")
	hit := fn(2, "github.com/sluice-dev/sluice/quota.(*Fleet).Hit")
	loop := fn(3, "github.com/nats-io/nats-server/v2/server.(*stream).internalLoop")
	loc := func(id uint64, f ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id}
		for _, x := range f {
			l.Line = append(l.Line, profile.Line{Function: x})
		}
		return l
	}
	lServe, lHit, lLoop := loc(1, serve), loc(2, hit), loc(3, loop)
	write := func(name string, samples ...*profile.Sample) string {
		p := &profile.Profile{
			SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
			Sample:     samples,
			Location:   []*profile.Location{lServe, lHit, lLoop},
			Function:   []*profile.Function{serve, hit, loop},
			PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
		}
		file := filepath.Join(dir, name)
		f, err := os.Create(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Write(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return file
	}
	ms := func(n int64) int64 { return n * 1_000_000 }
	a := write("a.pprof",
		&profile.Sample{Location: []*profile.Location{lServe}, Value: []int64{3, ms(30)}},
		&profile.Sample{Location: []*profile.Location{lHit, lServe}, Value: []int64{1, ms(10)}},
		&profile.Sample{Location: []*profile.Location{lLoop}, Value: []int64{2, ms(20)}, Label: map[string][]string{"stream": {"HOOKS_1"}}})
	b := write("b.pprof",
		&profile.Sample{Location: []*profile.Location{lLoop}, Value: []int64{4, ms(40)}, Label: map[string][]string{"stream": {"KV_sluice_claims_1"}}})
	acct, err := accountProfiles([]string{a, b}, 100) // 100 hooks
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{compHTTP: 300, compHit: 100, compSrvHooks: 200, compSrvClaims: 400}
	for c, v := range want {
		if math.Abs(acct.PerUnitUs[c]-v) > 1e-6 {
			t.Errorf("%s: %.1f µs per hook, want %.0f (all: %v)", c, acct.PerUnitUs[c], v, acct.PerUnitUs)
		}
	}
	if len(acct.PerUnitUs) != len(want) || math.Abs(acct.SampledUs-1000) > 1e-6 || math.Abs(acct.SampledSec-0.1) > 1e-9 {
		t.Errorf("sampled %.1f µs per hook, %.3f s, components %v; want 1000 µs, 0.1 s, 4 components", acct.SampledUs, acct.SampledSec, acct.PerUnitUs)
	}
	if _, err := accountProfiles([]string{filepath.Join(dir, "missing.pprof")}, 1); err == nil {
		t.Error("a missing profile: no error")
	}
}
