// Package dispatch owns the worker pipeline, from a record read to its
// committed offset: the consumer (the input group, and the delay group that
// reads the delay tiers, the budgets' lanes and the parked topic, each
// co-partitioned with the input), decoding and validating intents, the
// segment lookup, asking capping for each batch's decisions (control,
// send-by, pauses and users' limits included: dispatch holds no verdict of
// its own), the routes to deliveries, suppressed, dead letter, delay tiers,
// parked topic and lanes with their headers (the event contract), delivery
// statuses turned into refunds, the give-back of lost attempts, and
// commits only past what is written. Kafka's wire (groups, readers,
// writers, admin) is the Kafka room's, internal/kafka.
package dispatch
