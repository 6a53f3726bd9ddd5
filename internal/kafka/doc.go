// Package kafka is capper's Kafka room: everything capper says to Kafka
// goes through it, on kafka-go's protocol client. It owns the one
// consumer-group membership every group of capper uses (group.go: static
// membership and cooperative rebalancing, which kafka-go's ConsumerGroup
// lacks), its assignors (assign.go) and the consumer protocol's bytes
// (wire.go).
package kafka
