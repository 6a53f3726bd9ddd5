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
