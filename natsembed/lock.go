package natsembed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrDirInUse is returned by LockDir when another process (or another
// LockDir of this one) holds the directory.
var ErrDirInUse = errors.New("natsembed: data directory in use")

// LockFile is the name of the lock file LockDir creates in the directory.
const LockFile = "sluice.lock"

// LockDir takes an exclusive lock on dir (flock on dir/sluice.lock, not
// waiting) so that a second sluice process cannot open the same JetStream
// store while the first still runs or stops: two servers writing one
// store corrupt it. The lock goes with the process (also on kill -9);
// unlock releases it earlier. The file holds the holder's pid, for the
// error message of the next one.
func LockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natsembed: data dir: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("natsembed: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another sluice process (pid %s); stop it first, or use another --data-dir", ErrDirInUse, dir, string(holder))
		}
		return nil, fmt.Errorf("natsembed: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprint(os.Getpid())), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// MaxStore is the JetStream file storage this server may use, in bytes
// (the configured MaxStore, or what nats-server derived from the disk the
// store directory is on); 0 when JetStream is not running.
func (s *Server) MaxStore() int64 {
	if c := s.ns.JetStreamConfig(); c != nil {
		return c.MaxStore
	}
	return 0
}

// JetStreamEnabled reports whether JetStream runs. nats-server shuts it
// down after a write found no space left on a clustered store; it stays
// down until the process restarts.
func (s *Server) JetStreamEnabled() bool { return s.ns.JetStreamEnabled() }
