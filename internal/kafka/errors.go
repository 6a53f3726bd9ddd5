package kafka

// What a failed write says: whether a retry can cure it, and a short
// account of a batch's errors.

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// WriteErrors is a batch write's error per record (nil where written);
// MessageTooLargeError, kafka-go's own size check of a record, before
// anything is sent.
type (
	WriteErrors          = kafkago.WriteErrors
	MessageTooLargeError = kafkago.MessageTooLargeError
)

// Permanent reports whether a write error cannot succeed on a retry: a
// Kafka error the protocol does not call retriable (MESSAGE_TOO_LARGE,
// INVALID_RECORD, TOPIC_AUTHORIZATION_FAILED, ...) or kafka-go's own size
// check. Network errors, timeouts and a missing topic are temporary.
func Permanent(err error) bool {
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var kerr kafkago.Error
	return errors.As(err, &kerr) && !kerr.Temporary()
}

// Summarize shortens a batch's WriteErrors, whose text lists every
// record's error (thousands of lines for one failed batch), to a count and
// the first.
func Summarize(err error) string {
	var werrs kafkago.WriteErrors
	if !errors.As(err, &werrs) {
		return err.Error()
	}
	for _, e := range werrs {
		if e != nil {
			return fmt.Sprintf("%d of %d records failed, first: %v", werrs.Count(), len(werrs), e)
		}
	}
	return err.Error()
}

// ended is err, or ctx's own error when ctx ended meanwhile: a request
// cut by ctx's deadline fails with the connection's i/o timeout, which
// names no context, and a caller that waits with a deadline asks whether
// the wait ran out. The connection's deadline is ctx's, and its timeout
// may be seen before ctx's timer has cancelled ctx: a deadline passed
// counts as ended.
func ended(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}
