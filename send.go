package throttle

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// send sends out, admitted under rule r with demand d, with the base
// transport, holding the request's Concurrency slots (renewing their
// leases) until the response body ends; a failed round trip releases them
// at once. With Rule.Settle, the end of the body also settles the charge.
func (t *Transport) send(r *rule, d *demand, out *http.Request) (*http.Response, error) {
	h := t.lim.hold(r, d)
	if d != nil {
		d.sent = t.lim.now()
	}
	resp, err := h.bind(t.baseRT().RoundTrip(out))
	if err == nil && resp != nil {
		t.settleOnEnd(out.Context(), r, d, resp) // settle.go: Rule.Settle, when the body ends
	}
	return resp, err
}

// A hold is the lease of a sent request's slots: it renews them while the
// request is in flight and releases them once.
type hold struct {
	lim   *Limiter
	calls leaseCalls
	rule  string
	lease time.Duration // the shortest lease of the demand's slots
	gauge *ruleGauge    // counts the hold until it is released

	busy   sync.Mutex   // held while a renewal runs
	active atomic.Int64 // t.now() in ns at the last sign of life; 0: before the response

	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool // no more renewals
	released bool
}

// hold starts renewing the slots d holds, if any, just before req is sent.
// It returns nil when d holds none.
func (lim *Limiter) hold(r *rule, d *demand) *hold {
	if d == nil || d.held == nil {
		return nil
	}
	calls, ok := lim.leaseCalls(d.held)
	if !ok {
		return nil
	}
	h := &hold{lim: lim, calls: calls, rule: r.id, gauge: lim.gauge(r)}
	h.gauge.add(0, 1)
	for _, b := range d.Limits {
		if l := b.Limit; l.Algorithm == Concurrency && (h.lease == 0 || l.Per < h.lease) {
			h.lease = l.Per
		}
	}
	d.held = nil
	h.mu.Lock() // the timer's first run reads h.timer
	h.timer = time.AfterFunc(h.lease/3, h.renew)
	h.mu.Unlock()
	return h
}

// bind ties h to the outcome of the round trip: a failed round trip
// releases the slots at once; a response carries them in its body until
// the body is closed or read to the end. A nil h passes resp and err
// through.
func (h *hold) bind(resp *http.Response, err error) (*http.Response, error) {
	if h == nil {
		return resp, err
	}
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		h.release()
		return resp, err
	}
	h.touch()
	lb := &leaseBody{ReadCloser: resp.Body, h: h}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &leaseRWBody{leaseBody: lb, w: rw} // 101 Switching Protocols
	} else {
		resp.Body = lb
	}
	return resp, nil
}
