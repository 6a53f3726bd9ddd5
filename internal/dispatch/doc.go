// Package dispatch owns the worker pipeline: consume send-intents from Kafka
// in micro-batches, decode and validate them, resolve segments, decide the
// batch, write every outcome and only then commit the offsets.
package dispatch
