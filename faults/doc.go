// Package faults is sluice's fault and abuse suite: a cluster harness (three
// nats-servers clustered on 127.0.0.1, three sluice nodes, in-process or as
// real processes that can be killed with SIGKILL, stopped with SIGSTOP and
// restarted), load generators, and the invariant checkers that every
// scenario ends with (checks_test.go, which need neither NATS nor a test).
// The package is its tests. The promises checked after every scenario:
// docs/RELIABILITY.md "Fault tests".
package faults
