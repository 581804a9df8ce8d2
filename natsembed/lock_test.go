package natsembed_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/natsembed"
)

// A second LockDir of one directory fails with ErrDirInUse naming the
// holder's pid until the first unlocks (flock conflicts between two open
// files of one process as between two processes).
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	unlock, err := natsembed.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = natsembed.LockDir(dir)
	if !errors.Is(err, natsembed.ErrDirInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	unlock2, err := natsembed.LockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
