package faults

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountT mounts a lazyfs over a fresh backing directory and returns it
// and a function naming a path in the mount.
func mountT(t *testing.T) (*lazyFS, func(string) string) {
	t.Helper()
	dir := t.TempDir()
	mnt, back := filepath.Join(dir, "mnt"), filepath.Join(dir, "disk")
	for _, d := range []string{mnt, back} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := lazyFSForTest(t, mnt, back)
	return f, func(name string) string { return filepath.Join(mnt, name) }
}

func cut(t *testing.T, f *lazyFS) lazyLoss {
	t.Helper()
	loss, err := f.Cut()
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

func write(t *testing.T, path string, flag int, data []byte, off int64, sync bool) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}

func content(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func want(t *testing.T, path string, w []byte) {
	t.Helper()
	if got := content(t, path); !bytes.Equal(got, w) {
		t.Fatalf("%s after the cut: %d bytes %.40q, want %d bytes %.40q", filepath.Base(path), len(got), got, len(w), w)
	}
}

// A write that was never synced is gone after a cut: a new file is empty,
// an overwrite of synced data is undone, an append is cut off.
func TestUnsyncedWriteIsLost(t *testing.T) {
	f, p := mountT(t)
	write(t, p("new"), 0, []byte("never synced"), 0, false)
	write(t, p("old"), 0, []byte("durable content"), 0, true)
	write(t, p("old"), 0, []byte("XXXXXXX"), 0, false)
	write(t, p("old"), 0, []byte(" and more"), 15, false)
	want(t, p("old"), []byte("XXXXXXX content and more")) // before the cut: as written
	loss := cut(t, f)
	want(t, p("new"), nil)
	want(t, p("old"), []byte("durable content"))
	if loss.Files != 2 || loss.Bytes == 0 {
		t.Errorf("loss %+v, want 2 files and some bytes", loss)
	}
}

// A file created and never synced exists after a cut (names are durable at
// once), empty; so does a directory.
func TestCreatedNeverSyncedIsEmpty(t *testing.T) {
	f, p := mountT(t)
	if err := os.Mkdir(p("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, p("d/f"), 0, bytes.Repeat([]byte("x"), 3*pageSize+5), 0, false)
	cut(t, f)
	st, err := os.Stat(p("d/f"))
	if err != nil {
		t.Fatalf("created file after the cut: %v", err)
	}
	if st.Size() != 0 {
		t.Fatalf("created, never synced: %d bytes after the cut, want 0", st.Size())
	}
}

// fsync and fdatasync make a file's data durable.
func TestSyncedWriteIsKept(t *testing.T) {
	f, p := mountT(t)
	data := make([]byte, 5*pageSize+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	write(t, p("fsynced"), 0, data, 0, true)
	fh, err := os.OpenFile(p("fdatasynced"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(data[:1000]); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(fh.Fd())); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	cut(t, f)
	want(t, p("fsynced"), data)
	want(t, p("fdatasynced"), data[:1000])
	if s := f.Stats(); s.Fsyncs < 2 {
		t.Errorf("stats %+v: want 2 fsyncs", s)
	}
}

// An fsync on one descriptor makes durable what another descriptor of the
// same file wrote, and nothing written after it.
func TestSyncOnSecondDescriptor(t *testing.T) {
	f, p := mountT(t)
	w, err := os.OpenFile(p("f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("written by one")); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(p("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := w.Write([]byte(", lost")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cut(t, f)
	want(t, p("f"), []byte("written by one"))
}

// A write through an O_SYNC or O_DSYNC descriptor is durable at once; a
// plain write to the same file is not.
func TestSyncDescriptor(t *testing.T) {
	f, p := mountT(t)
	write(t, p("osync"), os.O_SYNC, []byte("synchronous"), 0, false)
	write(t, p("mixed"), 0, []byte("plain, lost"), 100, false)
	write(t, p("mixed"), unix.O_DSYNC, []byte("dsync"), 0, false)
	write(t, p("mixed"), unix.O_DSYNC, []byte("-more"), 5, false)
	cut(t, f)
	want(t, p("osync"), []byte("synchronous"))
	want(t, p("mixed"), []byte("dsync-more"))
	if s := f.Stats(); s.SyncWrites != 3 {
		t.Errorf("stats %+v: want 3 synchronous writes", s)
	}
}

// The safe replace — write a temporary file, fsync it, rename it over the
// old — keeps the new content; without the fsync the new name survives
// (a rename is durable at once), empty.
func TestRenameOfSyncedTemp(t *testing.T) {
	f, p := mountT(t)
	write(t, p("safe"), 0, []byte("old"), 0, true)
	write(t, p("unsafe"), 0, []byte("old"), 0, true)
	write(t, p("safe.tmp"), 0, []byte("new and synced"), 0, true)
	write(t, p("unsafe.tmp"), 0, []byte("new, never synced"), 0, false)
	for _, n := range []string{"safe", "unsafe"} {
		if err := os.Rename(p(n+".tmp"), p(n)); err != nil {
			t.Fatal(err)
		}
	}
	cut(t, f)
	want(t, p("safe"), []byte("new and synced"))
	want(t, p("unsafe"), nil)
	for _, n := range []string{"safe.tmp", "unsafe.tmp"} {
		if _, err := os.Stat(p(n)); !os.IsNotExist(err) {
			t.Errorf("%s after the cut: %v, want gone", n, err)
		}
	}
}

// A size change by truncate is durable at once, also of a file with
// unsynced writes; what those wrote is still lost.
func TestTruncateIsDurable(t *testing.T) {
	f, p := mountT(t)
	write(t, p("f"), 0, []byte("0123456789"), 0, true)
	write(t, p("f"), 0, []byte("AB"), 10, false)
	if err := os.Truncate(p("f"), 5); err != nil {
		t.Fatal(err)
	}
	cut(t, f)
	want(t, p("f"), []byte("01234"))
	write(t, p("f"), 0, []byte("xyz"), 5, false)
	if err := os.Truncate(p("f"), 20); err != nil {
		t.Fatal(err)
	}
	cut(t, f)
	want(t, p("f"), append([]byte("01234"), make([]byte, 15)...))
	write(t, p("f"), os.O_TRUNC, []byte("after O_TRUNC"), 0, false)
	cut(t, f)
	want(t, p("f"), nil)
}

// Random writes, syncs and truncates over two descriptors (one O_DSYNC)
// against a model of the volatile and the durable image: before a cut the
// file reads as last written, after it as last made durable.
func TestRandomAgainstModel(t *testing.T) {
	f, p := mountT(t)
	rng := rand.New(rand.NewPCG(21, 1))
	var vol, dur []byte // the file as written, and as durable
	grow := func(b []byte, n int) []byte {
		if len(b) < n {
			b = append(b, make([]byte, n-len(b))...)
		}
		return b
	}
	for round := range 4 {
		plain, err := os.OpenFile(p("f"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		dsync, err := os.OpenFile(p("f"), os.O_RDWR|unix.O_DSYNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			switch op := rng.IntN(20); {
			case op < 14: // a write through one of the two
				off, n := rng.IntN(6*pageSize), 1+rng.IntN(2*pageSize)
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				fh := plain
				if op >= 11 {
					fh = dsync
				}
				if _, err := fh.WriteAt(data, int64(off)); err != nil {
					t.Fatal(err)
				}
				vol = grow(vol, off+n)
				copy(vol[off:], data)
				if fh == dsync {
					dur = grow(dur, off+n)
					copy(dur[off:], data)
				}
			case op < 17: // fsync of either
				if err := []*os.File{plain, dsync}[op%2].Sync(); err != nil {
					t.Fatal(err)
				}
				dur = append(dur[:0], vol...)
			default: // truncate
				n := rng.IntN(7 * pageSize)
				if err := plain.Truncate(int64(n)); err != nil {
					t.Fatal(err)
				}
				vol, dur = grow(vol[:min(n, len(vol))], n), grow(dur[:min(n, len(dur))], n)
			}
		}
		plain.Close()
		dsync.Close()
		if got := content(t, p("f")); !bytes.Equal(got, vol) {
			t.Fatalf("round %d before the cut: the file differs from what was written (%d bytes, want %d)", round, len(got), len(vol))
		}
		cut(t, f)
		if got := content(t, p("f")); !bytes.Equal(got, dur) {
			t.Fatalf("round %d after the cut: the file differs from its durable image (%d bytes, want %d)", round, len(got), len(dur))
		}
		vol = append(vol[:0], dur...)
	}
}

// With lazyOptions.SyncLatency an fsync takes that long before it returns
// (and its data is durable once it has); a latency beyond maxSyncLatency
// is refused.
func TestSyncLatency(t *testing.T) {
	dir := t.TempDir()
	mnt, back := filepath.Join(dir, "mnt"), filepath.Join(dir, "disk")
	for _, d := range []string{mnt, back} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mountLazyFS(mnt, back, lazyOptions{SyncLatency: 2 * maxSyncLatency}); err == nil {
		t.Fatal("a sync latency beyond maxSyncLatency was accepted")
	}
	const latency = 100 * time.Millisecond
	f := lazyFSForTestWith(t, mnt, back, lazyOptions{SyncLatency: latency})
	p := filepath.Join(mnt, "slow")
	start := time.Now()
	write(t, p, 0, []byte("synced slowly"), 0, true)
	if took := time.Since(start); took < latency {
		t.Fatalf("a write and fsync took %v, under the sync latency %v", took, latency)
	}
	if st := f.Stats(); st.Fsyncs != 1 {
		t.Fatalf("%d fsyncs, want 1", st.Fsyncs)
	}
	cut(t, f)
	want(t, p, []byte("synced slowly"))
}
