package kafka

import kafkago "github.com/segmentio/kafka-go"

// Message and Header are kafka-go's: a record as it is read and written.
type (
	Message = kafkago.Message
	Header  = kafkago.Header
)

// Dialer is kafka-go's connection settings for a partition's reader
// (Options.Dialer).
type Dialer = kafkago.Dialer

// Where a partition with no committed offset is read from.
const (
	FirstOffset = kafkago.FirstOffset
	LastOffset  = kafkago.LastOffset
)

// ErrUnknownTopic is the brokers' answer for a topic they do not have.
var ErrUnknownTopic = kafkago.UnknownTopicOrPartition

// TimeLayout is the one format of every time capper writes in a record's
// headers (capper-decided-at, capper-released-at, capper-held-since, ...):
// RFC 3339 with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"
