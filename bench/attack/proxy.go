package attack

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// proxy forwards TCP connections to a backend until it is cut: from then on
// it keeps every connection open and forwards nothing, so a client sees a
// server that has stopped answering (the worst case: no error, only time).
type proxy struct {
	ln      net.Listener
	backend string
	cut     atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(backend string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, backend: backend}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding in both directions; connections stay open.
func (p *proxy) Cut() { p.cut.Store(true) }

// Close closes the listener and every connection.
func (p *proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.cut.Load() {
			continue // held open, never answered
		}
		b, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(b)
		p.wg.Add(2)
		go p.pipe(b, c)
		go p.pipe(c, b)
	}
}

// pipe copies src to dst until the proxy is cut; after that it reads and
// drops, so the peer's writes do not block but nothing arrives.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the proxy closed
		}
	}
}
