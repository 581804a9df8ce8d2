// Package natsembed runs nats-server in process: one node, a cluster of
// them or a leaf (ServerConfig, as nats-server's Options), with
// JetStream's store on the node's data directory, a lock that keeps a
// second process off that directory, and the node's side of what a 2xx
// waits for on it. It is the only package of sluice that links
// nats-server; everything else reaches the server over a nats.go
// connection.
package natsembed
