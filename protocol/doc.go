// Package protocol is sluice's public contract in Go, as docs/PROTOCOL.md
// states it, depending on the standard library only: the request and reply
// bodies of every NATS endpoint with their checks and bounds; the subjects
// (endpoints, tenant-scoped forms, events with their payloads); the token
// codec that puts user-supplied names into subjects and KV keys; and the
// error codes, one table (Errors) that the HTTP layer, the admin API, the
// service and the Go client use and PROTOCOL.md's error list is checked
// against. Every check returns an error wrapping ErrInvalid naming the field.
package protocol
