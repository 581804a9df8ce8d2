package cooldown_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// Example shares a penalty and a reading between two instances using the
// same account, on an embedded server from testkit.
func Example() {
	t := testkit.NewStandalone() // in a test: testkit.New(t) with the test's *testing.T
	defer t.Close()
	k := testkit.New(t)
	bucket := k.Bucket(t, cooldown.BucketConfig(protocol.DefaultPrefix, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A fixed clock keeps the output stable.
	const now = 1_700_000_000_000 // Unix ms
	clock := cooldown.WithClock(func() time.Time { return time.UnixMilli(now) })
	// The default budget is 250 ms; a generous one keeps the example stable
	// on a loaded machine.
	budget := cooldown.WithBudget(5 * time.Second)
	instanceA, err := cooldown.New(bucket, clock, budget)
	if err != nil {
		panic(err)
	}
	instanceB, err := cooldown.New(bucket, clock, budget)
	if err != nil {
		panic(err)
	}

	// Instance A was refused by "openai" for a minute, and read the quota of
	// "anthropic".
	until := int64(now + 60_000)
	if err := instanceA.Penalize(ctx, "acme", "openai", &until); err != nil {
		panic(err)
	}
	err = instanceA.Record(ctx, protocol.Reading{
		Account: "acme", Backend: "anthropic", ObservedAtMs: now - 1000,
		Snapshots: []protocol.Snapshot{{Key: "tpm", Label: "tokens/min", Percent: 37.5, ResetsAtMs: now + 30_000, ObservedAtMs: now - 1000}},
	})
	if err != nil {
		panic(err)
	}

	// Instance B sees both, one entry per backend asked for, in order.
	entries, err := instanceB.Load(ctx, "acme", []string{"openai", "anthropic", "mistral"})
	if err != nil {
		panic(err)
	}
	out, _ := json.MarshalIndent(protocol.LoadReply{Backends: entries}, "", "  ")
	fmt.Println(string(out))
	// Output:
	// {
	//   "backends": [
	//     {
	//       "backend": "openai",
	//       "last_checked_ms": null,
	//       "snapshots": [],
	//       "penalty_until_ms": 1700000060000
	//     },
	//     {
	//       "backend": "anthropic",
	//       "last_checked_ms": 1699999999000,
	//       "snapshots": [
	//         {
	//           "key": "tpm",
	//           "label": "tokens/min",
	//           "percent": 37.5,
	//           "resets_at_ms": 1700000030000,
	//           "observed_at_ms": 1699999999000
	//         }
	//       ],
	//       "penalty_until_ms": null
	//     },
	//     {
	//       "backend": "mistral",
	//       "last_checked_ms": null,
	//       "snapshots": [],
	//       "penalty_until_ms": null
	//     }
	//   ]
	// }
}
