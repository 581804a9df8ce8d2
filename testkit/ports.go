package testkit

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a loopback TCP port that was free a moment ago (for
// listeners whose address must be known before they start, as routes).
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreeAddr is a loopback address, 127.0.0.1:<FreePort>, for a listener
// given as host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago, picked below the kernel's ephemeral range where it can be read: a
// port from that range can be taken as another connection's source port
// before the server binds it (or rebinds it after a restart). Without the
// range, the kernel picks (port 0).
//
// Each port is also reserved until the test ends, for every test process
// of the machine (a lock file, reservePort): go test runs packages side
// by side, and a port picked here stays unbound until its server starts,
// or while it is killed and restarted. Unreserved, another package's test
// took such a port: its node failed with the port in use while the
// node's peers, routed to it, waited for it (or joined a stranger's
// cluster on it).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	low := ephemeralLow()
	out := make([]int, 0, n)
	for range n {
		l, release, err := listenFree(low)
		if err != nil {
			t.Fatalf("testkit: free port: %v", err)
		}
		t.Cleanup(release)
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// minPickedPort is the lowest port FreePorts picks from below the
// ephemeral range (above the ports services usually own).
const minPickedPort = 10000

// listenFree listens on a random free and unreserved loopback port in
// [minPickedPort, low), or on one the kernel picks when low leaves no such
// range or 100 tries found none; release ends the port's reservation.
func listenFree(low int) (l net.Listener, release func(), err error) {
	if low-minPickedPort >= 1000 {
		for range 100 {
			p := minPickedPort + rand.IntN(low-minPickedPort)
			release, ok := reservePort(p)
			if !ok {
				continue // another test's, maybe not bound yet
			}
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				return l, release, nil
			}
			release()
		}
	}
	for range 100 {
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		if release, ok := reservePort(l.Addr().(*net.TCPAddr).Port); ok {
			return l, release, nil
		}
		_ = l.Close()
	}
	return nil, nil, errors.New("no unreserved port in 100 the kernel picked")
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}
