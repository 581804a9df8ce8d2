package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseSubstrateRows(t *testing.T) {
	got, err := parseSubstrateRows("1/1/0.4/default/single, 3/3/0.25/always/atomic16,3/1/0.2/always/single/s3")
	if err != nil {
		t.Fatal(err)
	}
	want := []substrateSpec{{1, 1, 0.4, false, 1, 0}, {3, 3, 0.25, true, 16, 0}, {3, 1, 0.2, true, 1, 3}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("%v, want %v", got, want)
	}
	if s := got[1].String(); s != "3/3/0.25/always/atomic16" {
		t.Errorf("String: %q", s)
	}
	if s := got[2].String(); s != "3/1/0.2/always/single/s3" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []string{"", "1/1/0.4", "1/3/0.4/default/single", "0/1/0.4/default/single", "1/1/-1/default/single",
		"1/1/0.4/sometimes/single", "1/1/0.4/default/atomic1", "1/1/0.4/default/atomic", "1/1/0.4/default/fast16", "1/1/0.4/default/single/x",
		"1/1/0.4/default/single/s2", "3/1/0.4/default/single/s0", "3/1/0.4/default/single/3", "3/1/0.4/default/single/s3/s3"} {
		if _, err := parseSubstrateRows(bad); err == nil {
			t.Errorf("parseSubstrateRows(%q): want an error", bad)
		}
	}
	if _, err := parseSubstrateRows(defaultSubstrateRows); err != nil {
		t.Fatalf("the default rows: %v", err)
	}
}

// TestSubstrateRows runs two small rows without a quota, one message per
// publish and atomic batches of 4, against the real nats-server binary:
// each stores messages, every acked one is in the stream, and the bench
// leaves nothing behind.
func TestSubstrateRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the substrate test builds and starts nats-server")
	}
	rep, out := runBench(t, 5*time.Minute, "--workloads", "substrate", "--substrate-rows", "1/1/0/default/single,1/1/0/default/atomic4",
		"--scale-workers", "4", "--duration", "500ms", "--warmup", "200ms")
	if len(rep.Substrate) != 2 {
		t.Fatalf("%d substrate rows, want 2", len(rep.Substrate))
	}
	for _, r := range rep.Substrate {
		switch {
		case r.Error != "" || r.Errors != 0:
			t.Errorf("%s: %s (%d errors, first %s)", r.Spec, r.Error, r.Errors, r.FirstError)
		case r.Msgs == 0 || r.MsgsPerSec <= 0 || r.CPUPerMsgUs <= 0:
			t.Errorf("%s: nothing measured: %+v", r.Spec, r)
		case r.StreamMsgs < r.AckedInTotal || r.AckedInTotal < r.Msgs:
			t.Errorf("%s: %d acked in the window, %d in all, %d in the stream", r.Spec, r.Msgs, r.AckedInTotal, r.StreamMsgs)
		}
	}
	if r := rep.Substrate[1]; r.Msgs%4 != 0 {
		t.Errorf("atomic4 counted %d messages: not whole batches", r.Msgs)
	}
	if !strings.Contains(out, "1/1/0/default/atomic4") {
		t.Errorf("no table row for the batch row in:\n%s", out)
	}
}

// TestSubstrateStreams runs the shapes of a 3-node fleet of one shard per
// node: three R1 streams and three R3 streams, each led by its own server
// (its publishers on it), profiled: every acked message is in the
// streams, the three leaders differ, and the account of the servers'
// profiles puts the stream writes (and at R3 Raft) in their components.
func TestSubstrateStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the substrate test builds and starts nats-server")
	}
	prof := t.TempDir()
	rep, _ := runBench(t, 5*time.Minute, "--workloads", "substrate", "--substrate-rows", "3/1/0/default/single/s3,3/3/0/default/single/s3",
		"--scale-workers", "4", "--duration", "2s", "--warmup", "300ms", "--scale-profile", prof)
	if len(rep.Substrate) != 2 {
		t.Fatalf("%d substrate rows, want 2", len(rep.Substrate))
	}
	for _, r := range rep.Substrate {
		if r.Error != "" || r.Errors != 0 || r.Msgs == 0 || r.StreamMsgs < r.AckedInTotal {
			t.Errorf("%s: %s (%d errors, first %s; %d acked, %d in the streams)", r.Spec, r.Error, r.Errors, r.FirstError, r.AckedInTotal, r.StreamMsgs)
		}
		leaders := map[string]bool{}
		for _, l := range r.Leaders {
			_, server, _ := strings.Cut(l, ": ")
			leaders[server] = true
		}
		if len(r.Leaders) != 3 || len(leaders) != 3 || leaders["s0"] != true || leaders["s1"] != true || leaders["s2"] != true {
			t.Errorf("%s: leaders %v, want BENCH_k led by sk", r.Spec, r.Leaders)
		}
		if r.Account == nil || r.Account.Profiles != 3 || r.Account.PerUnitUs[compSrvHooks]+r.Account.PerUnitUs[compRaftHooks] <= 0 {
			t.Fatalf("%s: account %+v", r.Spec, r.Account)
		}
	}
	if r := rep.Substrate[1]; r.Account.PerUnitUs[compRaftHooks] <= 0 {
		t.Errorf("R3: no Raft in the account: %v", r.Account.PerUnitUs)
	}
}
