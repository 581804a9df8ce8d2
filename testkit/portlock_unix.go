//go:build unix

package testkit

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// portLockDir holds the lock files of the ports FreePorts reserved, one
// per port, shared by every test process of the machine.
var portLockDir = filepath.Join(os.TempDir(), "sluice-testkit-ports")

// reservePort takes port's lock (flock on its file, held by an open
// descriptor: a process that ends, however, releases it); ok is false
// when another test, in this process or another, holds it.
func reservePort(port int) (release func(), ok bool) {
	if err := os.MkdirAll(portLockDir, 0o777); err != nil {
		return func() {}, true // no lock directory: unreserved, as before
	}
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return func() {}, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return func() { _ = f.Close() }, true
}
