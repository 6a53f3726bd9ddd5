package kafka

import kafkago "github.com/segmentio/kafka-go"

// Message and Header are kafka-go's: a record as it is read and written.
type (
	Message = kafkago.Message
	Header  = kafkago.Header
)
