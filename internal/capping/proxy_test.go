package capping

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP forwarder in front of a real redis-server that can swallow
// every reply of one connection: the client's read times out, as after a lost
// network packet, while the server has run the commands. It can also hold
// a script call back (hold) and hand it to the server later (release), as
// a stalled server runs what was queued long ago.
type proxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool // the next connection that sends EVALSHA is muted
	muted  atomic.Int32
	// muteAt > 0: the connection that makes the muteAt-th EVALSHA write
	// (counting from when it was set) is muted from it on.
	muteAt, evalshas atomic.Int32
	// holding: the next EVALSHA write is held back, and its connection
	// muted; held are those writes, each with its server connection;
	// released counts the replies to them once released.
	holding  atomic.Bool
	heldMu   sync.Mutex
	held     []heldWrite
	released atomic.Int32
	// replied: when a reply last went through (unix ns).
	replied atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
	closing atomic.Bool
}

// heldWrite is a client's write the proxy has not passed on yet.
type heldWrite struct {
	server net.Conn
	data   []byte
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

// release hands the held writes to the server; their replies are counted
// in released, never passed on (the client gave up on them).
func (p *proxy) release() int {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	for _, h := range p.held {
		_, _ = h.server.Write(h.data)
	}
	n := len(p.held)
	p.held = nil
	return n
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var mute, held atomic.Bool
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					// Only the connection carrying the script calls; go-redis
					// writes command names in lower case.
					if bytes.Contains(buf[:n], []byte("evalsha")) {
						k := p.evalshas.Add(1)
						if p.armed.CompareAndSwap(true, false) || k == p.muteAt.Load() {
							mute.Store(true)
							p.muted.Add(1)
						}
						if p.holding.CompareAndSwap(true, false) {
							mute.Store(true)
							held.Store(true)
							p.heldMu.Lock()
							p.held = append(p.held, heldWrite{server: s, data: bytes.Clone(buf[:n])})
							p.heldMu.Unlock()
							continue
						}
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			if !held.Load() { // a held write still goes to the server
				_ = s.Close()
			}
		}()
		go func() { // server -> client
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && held.Load() {
					p.released.Add(1)
				}
				if n > 0 && !mute.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
					p.replied.Store(time.Now().UnixNano())
				}
				if err != nil {
					break
				}
			}
			_ = c.Close()
		}()
	}
}

func (p *proxy) close() {
	if p.closing.Swap(true) {
		return
	}
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
