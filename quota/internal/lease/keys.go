package lease

import (
	"encoding/json"
	"strconv"

	"github.com/sluice-dev/sluice/protocol"
)

// Keys of the leases bucket: the fleet's partition count, one heartbeat per
// member, one lease per partition.
const (
	configKey    = "config.partitions"
	leaseStem    = "lease."
	memberStem   = "member."
	memberFilter = "member.*"
	leaseFilter  = "lease.*"
)

func leaseKey(n int) string { return leaseStem + strconv.Itoa(n) }

func memberKey(id string) string { return memberStem + protocol.EncodeToken(id) }

// parseLeaseKey returns n for "lease.<n>" with 0 <= n < p.
func parseLeaseKey(key string, p int) (int, bool) {
	if len(key) <= len(leaseStem) || key[:len(leaseStem)] != leaseStem {
		return 0, false
	}
	n, err := strconv.Atoi(key[len(leaseStem):])
	if err != nil || n < 0 || n >= p || strconv.Itoa(n) != key[len(leaseStem):] {
		return 0, false
	}
	return n, true
}

// partitionsRecord is the value of config.partitions: the partition
// count and the shard count (absent for 1: the record of a fleet without
// shards is unchanged).
type partitionsRecord struct {
	Partitions int `json:"partitions"`
	Shards     int `json:"shards,omitempty"`
}

// memberRecord is the value of a member's heartbeat.
type memberRecord struct {
	ID         string `json:"id"`
	Partitions int    `json:"partitions"`
	// Server is the NATS server the member is connected to (Assign's
	// hosts), "" when it is not connected.
	Server string `json:"server,omitempty"`
}

// parseServer returns the server a heartbeat names ("" when unreadable).
func parseServer(val []byte) string {
	var r memberRecord
	if json.Unmarshal(val, &r) != nil {
		return ""
	}
	return r.Server
}

// leaseRecord is the value of a lease.
type leaseRecord struct {
	Owner string `json:"owner"`
}

func parseOwner(val []byte) string {
	var r leaseRecord
	if json.Unmarshal(val, &r) != nil || r.Owner == "" {
		return "?" // held, by something unreadable: never ours
	}
	return r.Owner
}
