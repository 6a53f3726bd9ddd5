package kafka

// The connections of the partition readers: kafka-go reads a fetch's
// response through a 4 KiB buffer, a read system call per 4 KiB of
// records. A larger buffer under it makes that one call per readBuffer.

import (
	"bufio"
	"context"
	"net"
)

// readBuffer is how much a reader's connection reads at once: a lane's or
// a delay tier's fetch (256 KiB) in four calls.
const readBuffer = 64 << 10

// bufferedConn is a connection whose reads go through a larger buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dialBuffered dials as kafka-go's Dialer does without a DialFunc (TLS and
// SASL still go over the connection it returns).
func dialBuffered(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBuffer)}, nil
}
