// Package faults is sluice's fault and abuse suite: a cluster harness (three
// nats-servers clustered on 127.0.0.1, three sluice nodes, in-process or as
// real processes that can be killed with SIGKILL, stopped with SIGSTOP and
// restarted), load generators, and the invariant checkers that every
// scenario ends with. The package is its tests: the scenarios, the harness,
// and the checkers (checks_test.go, which need neither NATS nor a test).
//
// The promises checked after every scenario:
//
//   - never a 2xx for a hook nobody stored: every hook answered 202 is in
//     the HOOKS stream, and every id a 200 duplicate names is too; no hook
//     id is stored twice;
//   - at most one winner per dedupe key: all 202 and 200 answers for a key
//     name one hook id (a node that answers from its node-local fallback
//     still takes the claim in the fleet's KV claim store, so it dedupes
//     against every other node: docs/DESIGN.md "Failure semantics"; the
//     Report counts splits and the scenario decides whether it may have
//     any);
//   - counts never above their max: every granted reserve returns a count
//     <= max, and the slots the clients hold at once never exceed max;
//   - the replay store never holds more than its capacity;
//   - every 2xx answer is well formed (200 or 202, a JSON body naming the
//     hook id that X-Hook-Id names), and the stored hook an answer names
//     has the tenant, source and dedupe key that answer was for.
package faults
