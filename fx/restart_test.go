package fx_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRestartRewritesNoStreamMeta: a node that restarts on its data dir
// with the same configuration writes no stream's meta.inf. nats-server
// rewrites that file on every stream update, changed or not, and a power
// cut before the next sync can leave it empty: the stream (HOOKS, the
// settle events) would then be gone at the next start, and the node would
// refuse to start on a loss its own start caused.
func TestRestartRewritesNoStreamMeta(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir}
	startNode(t, args...).stop()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	var metas []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "meta.inf" && filepath.Base(filepath.Dir(filepath.Dir(p))) == "streams" {
			metas = append(metas, p)
			return os.Chtimes(p, old, old)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) < 5 {
		t.Fatalf("found %d streams' meta.inf under %s: %v", len(metas), dir, metas)
	}
	startNode(t, args...).stop()
	for _, p := range metas {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			rel, _ := filepath.Rel(dir, p)
			t.Errorf("the restart rewrote %s", rel)
		}
	}
}
