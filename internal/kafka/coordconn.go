package kafka

// A member's own connection to its group's coordinator, for its offset
// commits: kafka-go's Transport asks which broker coordinates the group
// (FindCoordinator) before every request that names a group, a round trip
// more per commit (one per worker batch), and hands each request to a
// connection goroutine and back. The member knows its coordinator (asked
// when it joined, again after an answer says it moved), and sends its
// commits one at a time (commitMu): over this connection, by the
// goroutine that commits.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// coordConn is one connection to a coordinator; not safe for concurrent
// use (the group's commitMu guards it).
type coordConn struct {
	addr     string
	kc       *kafkago.Conn // kafka-go's connection over conn: closed with it
	conn     net.Conn
	rw       io.ReadWriter // conn, read through a buffer
	clientID string
	version  int16 // OffsetCommit's, the highest both sides speak
	corr     int32
}

// dialCoordinator connects to addr as d does and learns the OffsetCommit
// version to speak.
func dialCoordinator(ctx context.Context, d *kafkago.Dialer, addr string) (*coordConn, error) {
	var raw net.Conn
	kc, err := capturing(d, &raw).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the coordinator %s: %w", addr, err)
	}
	c := &coordConn{addr: addr, kc: kc, conn: raw, clientID: d.ClientID}
	if raw == nil { // a kafka-go that dials otherwise: not a connection to send on
		_ = kc.Close()
		return nil, fmt.Errorf("connect to the coordinator %s: no connection dialed", addr)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	versions, err := kc.ApiVersions()
	_ = raw.SetDeadline(time.Time{})
	if err != nil {
		_ = kc.Close()
		return nil, fmt.Errorf("api versions of the coordinator %s: %w", addr, err)
	}
	c.version = -1
	for _, v := range versions {
		if v.ApiKey == int16(protocol.OffsetCommit) {
			c.version = protocol.OffsetCommit.SelectVersion(v.MinVersion, v.MaxVersion)
		}
	}
	if c.version < 0 {
		_ = kc.Close()
		return nil, fmt.Errorf("the coordinator %s does not take offset commits", addr)
	}
	c.rw = struct {
		io.Reader
		io.Writer
	}{bufio.NewReader(raw), raw}
	return c, nil
}

// roundTrip sends req and reads its answer, within ctx. An error leaves
// the connection unusable: the caller closes it.
func (c *coordConn) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	_ = c.conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
	defer stop()
	c.corr++
	res, err := protocol.RoundTrip(c.rw, c.version, c.corr, c.clientID, req)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return res, err
}

func (c *coordConn) close() { _ = c.kc.Close() }
