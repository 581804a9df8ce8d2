// Package protocol is sluice's public contract in Go, as docs/PROTOCOL.md
// states it: importable by any program, it depends on the standard
// library only. It holds
//
//   - the request and reply bodies of every NATS endpoint (quota.*,
//     claims.*, replay.claim, cooldown.*) with their checks and bounds;
//   - the subjects: the endpoints under <prefix>.v1., their tenant-scoped
//     forms, and the event subjects (Subjects) with their payloads
//     (SettleEvent, Lifecycle);
//   - the token codec that puts user-supplied names into subjects and KV
//     keys (EncodeToken, TenantToken);
//   - the error codes: one table (Errors) that the HTTP layer, the admin
//     API, the NATS service and the Go client answer and read with, and
//     that docs/PROTOCOL.md's error list is checked against.
//
// Every check returns an error wrapping ErrInvalid that names the field.
package protocol
