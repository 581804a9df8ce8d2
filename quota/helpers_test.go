package quota

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
	"go.uber.org/goleak"
)

// The tests here need no owner (they run against fakes of the wire or
// none); quota/owner's tests run owners and clients together.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefixSeq atomic.Int64

// newPrefix gives every test its own subjects on a shared server.
func newPrefix() string { return fmt.Sprintf("qc%d", prefixSeq.Add(1)) }

// hooks is a unit "hooks" charge with the given burst at a rate so slow
// that nothing refills during a test.
func hooks(tenant string, burst int64) protocol.Charge {
	inc := int64(time.Hour / time.Microsecond)
	return protocol.Charge{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: inc, CapacityUs: inc * burst}
}
