// Package faultproxy is a TCP proxy on loopback that sits between a client
// and a real server (Redis) in tests and injects faults while traffic
// flows: latency per direction, a lost reply after the command was
// executed, reset connections, refused connections and a blackhole that
// stalls all traffic.
//
// Every control takes effect at once, on existing connections as well as
// new ones. The proxy forwards bytes without parsing them; a "command" is
// whatever one read from the client returns, which for a RESP client that
// waits for each reply is one command (or one pipeline).
package faultproxy

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialTimeout bounds the proxy's connection attempt to the target.
const dialTimeout = 2 * time.Second

// A Direction is one way of a proxied connection.
type Direction int

const (
	// ToServer is the client-to-server direction (commands).
	ToServer Direction = iota
	// ToClient is the server-to-client direction (replies).
	ToClient
)

// Stats counts what a [Proxy] has seen since it started.
type Stats struct {
	// Accepted counts client connections accepted and forwarded.
	Accepted int
	// Refused counts client connections reset at once by [Proxy.SetRefuse].
	Refused int
	// Active is the number of forwarded connections still open.
	Active int
	// BytesToServer and BytesToClient count the bytes forwarded each way
	// (counted as the proxy starts to write them).
	BytesToServer, BytesToClient int64
	// Dropped counts replies swallowed by [Proxy.DropNextReply] and
	// [Proxy.DropReplyTo].
	Dropped int
	// Jittered counts chunks given a random delay by [Proxy.SetJitter].
	Jittered int
}

// jitter is the random delay of one direction: see [Proxy.SetJitter].
type jitter struct {
	fraction float64
	lo, hi   time.Duration
}

// delay draws the random delay of one chunk: 0, or with probability
// fraction a duration uniform in [lo, hi].
func (j jitter) delay() time.Duration {
	if j.fraction <= 0 || rand.Float64() >= j.fraction {
		return 0
	}
	return j.lo + rand.N(j.hi-j.lo+1)
}

// A Proxy forwards loopback TCP connections to a target address and
// injects faults. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	links     map[*link]struct{}
	latency   [2]time.Duration
	jitter    [2]jitter
	drops     [][]byte      // armed drops: lower-case substrings, "" matches any command
	gate      chan struct{} // closed while traffic flows; open while blackholed
	refuse    bool
	closed    bool
	accepted  int
	refused   int
	dropped   int
	jittered  int
	bytesUp   atomic.Int64
	bytesDown atomic.Int64
}

// New starts a proxy on a free loopback port that forwards to targetAddr,
// and closes it in t.Cleanup. It fails the test if it cannot listen.
func New(t testing.TB, targetAddr string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{
		target: targetAddr,
		ln:     ln,
		done:   make(chan struct{}),
		links:  map[*link]struct{}{},
		gate:   gate,
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of bytes forwarded in direction dir by d
// (0 removes the delay). Chunks are delayed one after another, so latency
// adds up over a pipeline. It applies to chunks read from now on.
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency[dir] = d
}

// SetJitter delays a random fraction (0 to 1) of the chunks forwarded in
// direction dir, each by a duration drawn uniformly from [lo, hi], on top
// of any [Proxy.SetLatency]; fraction 0 removes it. Chunks of one
// connection stay in order, so a delayed reply also holds back the
// replies behind it on the same connection, as a slow network would.
// It applies to chunks read from now on. It panics if lo is negative or
// hi is below lo.
func (p *Proxy) SetJitter(dir Direction, fraction float64, lo, hi time.Duration) {
	if lo < 0 || hi < lo {
		panic("faultproxy: SetJitter: need 0 <= lo <= hi")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.jitter[dir] = jitter{fraction: fraction, lo: lo, hi: hi}
}

// DropNextReply arms one lost reply: the next command any client sends is
// forwarded to the server, which executes it, but the server's reply is
// swallowed and both connections are reset. The client sees its connection
// reset after its write: it cannot tell whether the command ran (it did).
// Each call arms one more drop, for the command after.
func (p *Proxy) DropNextReply() { p.DropReplyTo("") }

// DropReplyTo is [Proxy.DropNextReply] for the next command whose bytes
// contain match, compared without regard to case (e.g. "evalsha", "set");
// other commands pass. An empty match matches any command.
func (p *Proxy) DropReplyTo(match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = append(p.drops, bytes.ToLower([]byte(match)))
}

// ResetAll resets (TCP RST) every open connection, both the client's side
// and the server's. New connections are accepted as before.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// SetRefuse makes the proxy reset every new connection as soon as it is
// accepted (on), as a server that is down would, or forward them again
// (off). Open connections are not affected.
func (p *Proxy) SetRefuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// SetBlackhole stops all traffic (on): connections, open and new, are
// accepted but nothing is forwarded either way, so clients wait until their
// own timeouts, as across a network partition. Off forwards again, in
// order, whatever was held back.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := isClosed(p.gate)
	switch {
	case on && open:
		p.gate = make(chan struct{})
	case !on && !open:
		close(p.gate)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Accepted:      p.accepted,
		Refused:       p.refused,
		Active:        len(p.links),
		BytesToServer: p.bytesUp.Load(),
		BytesToClient: p.bytesDown.Load(),
		Dropped:       p.dropped,
		Jittered:      p.jittered,
	}
}

// Close stops the proxy: it stops listening, resets every connection and
// waits for its goroutines to end. Closing twice does nothing. [New]
// registers Close with t.Cleanup.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	_ = p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			reset(c)
			return
		case p.refuse:
			p.refused++
			p.mu.Unlock()
			reset(c)
			continue
		}
		p.accepted++
		l := newLink(p, c)
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

// takeDrop reports whether chunk triggers an armed drop, and disarms it.
func (p *Proxy) takeDrop(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.drops) == 0 {
		return false
	}
	m := p.drops[0]
	if len(m) > 0 && !bytes.Contains(bytes.ToLower(chunk), m) {
		return false
	}
	p.drops = p.drops[1:]
	return true
}

// hold waits for the latency of dir (fixed and random) and for an open
// gate. It returns false if the link or the proxy closed meanwhile.
func (p *Proxy) hold(l *link, dir Direction) bool {
	p.mu.Lock()
	d := p.latency[dir]
	if j := p.jitter[dir].delay(); j > 0 {
		d += j
		p.jittered++
	}
	p.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			return false
		}
	}
	for {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		select {
		case <-gate:
			// The gate may have been closed and replaced by a new
			// blackhole since it was read: check again.
			p.mu.Lock()
			open := isClosed(p.gate)
			p.mu.Unlock()
			if open {
				return true
			}
		case <-l.done:
			return false
		}
	}
}

// A link is one proxied connection: the client's and the proxy's own to the
// target.
type link struct {
	p         *Proxy
	client    net.Conn
	done      chan struct{} // closed when the link is closed or reset
	dropReply atomic.Bool   // the reply now due is to be swallowed

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

func newLink(p *Proxy, client net.Conn) *link {
	return &link{p: p, client: client, done: make(chan struct{})}
}

func (l *link) run() {
	defer l.p.wg.Done()
	defer func() {
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	}()
	server, err := net.DialTimeout("tcp", l.p.target, dialTimeout)
	if err != nil {
		l.reset()
		return
	}
	l.mu.Lock()
	if l.closed { // reset while dialling
		l.mu.Unlock()
		reset(server)
		return
	}
	l.server = server
	l.mu.Unlock()
	var pumps sync.WaitGroup
	pumps.Go(func() { l.pump(ToServer) })
	pumps.Go(func() { l.pump(ToClient) })
	pumps.Wait()
}

func (l *link) pump(dir Direction) {
	l.mu.Lock()
	server := l.server
	l.mu.Unlock()
	src, dst, count := l.client, server, &l.p.bytesUp
	if dir == ToClient {
		src, dst, count = server, l.client, &l.p.bytesDown
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if dir == ToClient && l.dropReply.Load() {
				l.p.mu.Lock()
				l.p.dropped++
				l.p.mu.Unlock()
				l.reset()
				return
			}
			if !l.p.hold(l, dir) {
				return
			}
			if dir == ToServer && l.p.takeDrop(buf[:n]) {
				// Armed before the write, so the reply cannot
				// overtake it.
				l.dropReply.Store(true)
			}
			// Counted before the write, so a reply can never be seen
			// before the bytes of its command were counted.
			count.Add(int64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				l.close()
				return
			}
		}
		if err != nil {
			l.close()
			return
		}
	}
}

// close closes both connections (FIN), once.
func (l *link) close() { l.shut((net.Conn).Close) }

// reset resets both connections (RST), once.
func (l *link) reset() { l.shut(func(c net.Conn) error { reset(c); return nil }) }

func (l *link) shut(f func(net.Conn) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	_ = f(l.client)
	if l.server != nil {
		_ = f(l.server)
	}
}

// reset closes c with a TCP RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
