package throttle

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/quotakit/throttle/quota"
)

// releaseResponse releases the slots carried by resp's body, if any: the
// retry path calls it before it asks for the resend's slot.
func releaseResponse(resp *http.Response) {
	if resp == nil {
		return
	}
	var body io.Closer = resp.Body
	for {
		// Peeked at by a Limited function, kept for Rule.Settle.
		pb, ok := body.(interface{ Underlying() io.Closer })
		if !ok {
			break
		}
		body = pb.Underlying()
	}
	switch b := body.(type) {
	case *leaseBody:
		b.h.release()
	case *leaseRWBody:
		b.h.release()
	}
}

func (h *hold) touch() { h.active.Store(h.lim.now().UnixNano()) }

func (h *hold) event(k LeaseEventKind, err error) {
	if f := h.lim.hooks.OnLease; f != nil {
		f(LeaseEvent{Rule: h.rule, Kind: k, Err: err})
	}
}

// renew runs on h's timer: it renews the leases, or stops renewing when
// the response body has been idle for a whole lease time.
func (h *hold) renew() {
	h.busy.Lock()
	defer h.busy.Unlock()
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	if last := h.active.Load(); last != 0 && h.lim.now().UnixNano()-last >= int64(h.lease) {
		h.stopped = true
		h.mu.Unlock()
		h.event(LeaseAbandoned, nil)
		return
	}
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), min(storeCallTimeout, h.lease/3))
	err := h.calls.renew(ctx)
	cancel()

	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	kind := LeaseRenewed
	switch {
	case errors.Is(err, quota.ErrLeaseLost):
		h.stopped, kind = true, LeaseLost
	case err != nil:
		kind = LeaseRenewFailed
	}
	if !h.stopped {
		h.timer.Reset(h.lease / 3)
	}
	h.mu.Unlock()
	h.event(kind, err)
}

// release stops the renewals and frees the slots, once. It returns after
// any renewal in progress has finished, so no goroutine outlives it.
func (h *hold) release() {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released, h.stopped = true, true
	h.timer.Stop()
	h.mu.Unlock()
	h.gauge.add(0, -1)

	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	err := h.calls.release(ctx)
	cancel()
	if err != nil {
		h.event(LeaseReleaseFailed, err)
	}
	h.busy.Lock() // wait out a renewal in progress
	//lint:ignore SA2001 the empty section is the wait
	h.busy.Unlock()
}

// leaseBody is a response body that releases its request's slots when it
// is closed or read to the end.
type leaseBody struct {
	io.ReadCloser
	h *hold
}

// Read reads from the body; at the end of it, it releases the slots.
func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.touch()
	if err == io.EOF {
		b.h.release()
	}
	return n, err
}

// Close closes the body and releases the slots.
func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.h.release()
	return err
}

// leaseRWBody keeps a writable body (a protocol switch) writable.
type leaseRWBody struct {
	*leaseBody
	w io.Writer
}

// Write writes to the underlying connection.
func (b *leaseRWBody) Write(p []byte) (int, error) {
	b.h.touch()
	return b.w.Write(p)
}
