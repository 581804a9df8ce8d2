// Package natsembed runs nats-server in process: one node, a cluster of
// them or a leaf (ServerConfig, as nats-server's Options), with
// JetStream's store on the node's data directory, a lock that keeps a
// second process off that directory, and what package durability reads
// of the server (durability.Embedded: StoreDir, StreamSeqs, Leads). It is
// the only package of sluice that links
// nats-server; everything else reaches the server over a nats.go
// connection.
package natsembed
