//go:build unix

package testkit

import "testing"

// TestFreePortsReserved: a port FreePorts returned is reserved until its
// test ends, against every other picker (another process's alike: the
// lock is a file's); released, it can be taken again.
func TestFreePortsReserved(t *testing.T) {
	var p int
	t.Run("holder", func(t *testing.T) {
		p = FreePort(t)
		if _, ok := reservePort(p); ok {
			t.Fatalf("port %d, just returned by FreePort, could be reserved again", p)
		}
	})
	release, ok := reservePort(p)
	if !ok {
		t.Fatalf("port %d still reserved after its test ended", p)
	}
	release()
}
