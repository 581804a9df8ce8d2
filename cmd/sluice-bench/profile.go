package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// profileEntry is one CPU profile taken during the profiled pass.
type profileEntry struct {
	Workload  string   `json:"workload"`
	Inflight  int      `json:"inflight"`
	Side      string   `json:"side"` // server (the edge) | client (this process)
	File      string   `json:"file"`
	OpsPerSec float64  `json:"ops_per_sec"`
	Top       []string `json:"top,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// profile runs the sluice rows once more at the largest --inflight (and the
// edge row) while taking CPU profiles of the edge (its opt-in pprof
// listener, cmd/edge/pprof.go) and of this process (the client side).
// These rows are not part of the comparison: profiling costs CPU.
func (b *bench) profile(ctx context.Context) ([]profileEntry, error) {
	if b.edge == nil || b.edge.pprofAddr == "" {
		return nil, fmt.Errorf("profile: the edge has no pprof listener")
	}
	dir := b.o.profileDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := slices.Max(b.o.inflight)
	var out []profileEntry
	type rowFn func(hooks window) row
	type profRow struct {
		name  string
		n     int
		claim bool
		fn    rowFn
	}
	var rows []profRow
	for _, w := range b.o.workloads {
		rows = append(rows, profRow{w.Name, n, w.Claim, func(hooks window) row {
			errs := &firstError{}
			return b.measure(ctx, 0, w.Name, n, "sluice", b.edge.child, sluiceOp(b.qc.Hit, frameSettle(b.qc), w, keyPrefix(), errs), errs, hooks)
		}})
		if w.Settle { // the cycle as a NATS client runs it (row sluice-client)
			rows = append(rows, profRow{w.Name + "-client", n, w.Claim, func(hooks window) row {
				errs := &firstError{}
				return b.measure(ctx, 0, w.Name, n, "sluice-client", b.edge.child, sluiceOp(b.cl.Hit, clientSettle(b.cl), w, keyPrefix(), errs), errs, hooks)
			}})
		}
	}
	if b.o.edge {
		hn := b.o.httpInflight
		rows = append(rows, profRow{"edge", hn, false, func(hooks window) row {
			client := httpClient(hn)
			defer client.CloseIdleConnections()
			errs := &firstError{}
			return b.measure(ctx, 0, "edge", hn, "edge", b.edge.child, hookOp(client, b.edge.httpURL, b.o.httpTenants, keyPrefix(), errs), errs, hooks)
		}})
	}
	secs := max(1, int(b.o.duration/time.Second))
	for _, r := range rows {
		base := strings.NewReplacer("+", "-").Replace(r.name) + "-" + fmt.Sprint(r.n)
		srvFile := filepath.Join(dir, "edge-"+base+".pprof")
		cliFile := filepath.Join(dir, "client-"+base+".pprof")
		var srvErr, cliErr error
		done := make(chan struct{})
		var cf *os.File
		hooks := window{
			start: func() {
				go func() {
					defer close(done)
					srvErr = fetchProfile(ctx, b.edge.pprofAddr, secs, srvFile)
				}()
				if cf, cliErr = os.Create(cliFile); cliErr == nil {
					cliErr = pprof.StartCPUProfile(cf)
				}
			},
			end: func() {
				if cliErr == nil {
					pprof.StopCPUProfile()
				}
				if cf != nil {
					cf.Close()
				}
			},
		}
		b.logf("profiling %s at %d in flight (%d s)", r.name, r.n, secs)
		var before baseline
		if r.claim && b.o.drain {
			before = b.storeBaseline(ctx)
		}
		res := r.fn(hooks)
		<-done
		if r.claim && b.o.drain {
			// Let the row's claims expire before the next profile.
			b.drainClaims(ctx, 0, workload{Name: r.name}, r.n, before)
		}
		for _, e := range []struct {
			side, file string
			err        error
		}{{"server", srvFile, srvErr}, {"client", cliFile, cliErr}} {
			pe := profileEntry{Workload: r.name, Inflight: r.n, Side: e.side, File: e.file, OpsPerSec: res.OpsPerSec}
			if e.err != nil {
				pe.Error = e.err.Error()
			} else {
				pe.Top, pe.Error = pprofTop(ctx, e.file)
			}
			out = append(out, pe)
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

func fetchProfile(ctx context.Context, addr string, secs int, file string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		return fmt.Errorf("pprof: %s: %s", res.Status, msg)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop writes `go tool pprof -top` (flat and -cum) next to file and
// returns the first lines of the flat one.
func pprofTop(ctx context.Context, file string) ([]string, string) {
	var first []string
	for _, v := range []struct{ suffix, flag string }{{".top.txt", "-flat"}, {".cum.txt", "-cum"}} {
		cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", v.flag, "-nodecount=40", file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Sprintf("go tool pprof: %v: %s", err, firstLine(string(out)))
		}
		if err := os.WriteFile(strings.TrimSuffix(file, ".pprof")+v.suffix, out, 0o644); err != nil {
			return nil, err.Error()
		}
		if first == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			first = lines[:min(len(lines), 25)]
		}
	}
	return first, ""
}

func printProfiles(w io.Writer, ps []profileEntry) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== profiles (extra pass; not part of the comparison) ==")
	for _, p := range ps {
		fmt.Fprintf(w, "\n-- %s %s at %d in flight (%.0f ops/s while profiled): %s\n", p.Side, p.Workload, p.Inflight, p.OpsPerSec, p.File)
		if p.Error != "" {
			fmt.Fprintln(w, "   error:", p.Error)
			continue
		}
		for _, l := range p.Top {
			fmt.Fprintln(w, "  ", l)
		}
	}
}
