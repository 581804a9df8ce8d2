// Package claimwire is the JSON body of claims.settle, claims.release and
// (tenant, source and key only) claims.get as the Go client encodes it
// (docs/PROTOCOL.md): the client sends it, and the service decodes a body
// in exactly this encoding on its fast path (service/claimdecode.go).
package claimwire

// Request is the body; empty members are left out.
type Request struct {
	Tenant   string `json:"tenant"`
	Source   string `json:"source"`
	Key      string `json:"key"`
	HookID   string `json:"hook_id,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// TTLMs is the settle extension: how long the committed claim is kept
	// (absent: the service's --dedupe-ttl).
	TTLMs int64 `json:"ttl_ms,omitempty"`
}
