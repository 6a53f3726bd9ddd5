// Package kafka is capper's Kafka room: everything capper says to Kafka
// goes through it, on kafka-go's protocol client. It owns the one
// consumer-group membership every group of capper uses (group.go: static
// membership and cooperative rebalancing, which kafka-go's ConsumerGroup
// lacks), its assignors (assign.go), the consumer protocol's bytes
// (wire.go), its commits on a connection of its own to the coordinator
// (commit.go, coordconn.go), and the record batches capper reads and writes: a partition
// reader's fetches (fetch.go, records.go) and a writer's batches
// (encode.go), each done here in one buffer rather than a record at a time.
package kafka
