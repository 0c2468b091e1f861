package throttle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/quotakit/throttle/quota"
)

// maxSettleBody bounds how much of a response body [Rule].Settle sees:
// its first MiB.
const maxSettleBody = 1 << 20

// settleOnEnd arranges for rule r's Settle to read the cost of resp, the
// answer to a request whose demand was d, once the caller is done with
// the body: when it reads the body to its end or closes it, whichever
// comes first. A response without a body is read at once.
func (t *Transport) settleOnEnd(ctx context.Context, r *rule, d *demand, resp *http.Response) {
	if r.Settle == nil || d == nil || d.granted == nil {
		return // nothing to settle, or nothing charged (a failure mode, a shadow refusal)
	}
	end := func(head []byte) {
		answer := *resp
		answer.Body = io.NopCloser(bytes.NewReader(head))
		cost, ok := r.Settle(&answer)
		if !ok {
			t.lim.settleEvent(SettleEvent{Context: ctx, Rule: r.id, Charged: d.Cost})
			return
		}
		// The caller may end its context once it has the body.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		defer cancel()
		_ = t.lim.settle(sctx, r, d, cost)
	}
	body := resp.Body
	if _, rw := body.(io.Writer); rw || body == nil || body == http.NoBody {
		end(nil) // no body, or a protocol switch's connection: the headers only
		return
	}
	resp.Body = &settleBody{ReadCloser: body, end: end}
}

// settleBody is a response body that keeps the first maxSettleBody bytes
// the caller reads, and hands them to end once, when the caller reads to
// the end or closes it.
type settleBody struct {
	io.ReadCloser
	end func(head []byte)

	mu   sync.Mutex
	head []byte
	done bool
}

// Read reads from the body and keeps a copy of the head.
func (b *settleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	if !b.done && len(b.head) < maxSettleBody {
		b.head = append(b.head, p[:min(n, maxSettleBody-len(b.head))]...)
	}
	b.mu.Unlock()
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

// Close closes the body and settles with what was read.
func (b *settleBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// Underlying returns the body below, so that releaseResponse finds the
// one that holds the request's slots.
func (b *settleBody) Underlying() io.Closer { return b.ReadCloser }

func (b *settleBody) finish() {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	head := b.head
	b.head = nil
	b.mu.Unlock()
	b.end(head)
}

// settle corrects what d, the demand of a call under rule r, was charged
// to cost: the limits charged the demand's cost are charged cost instead
// (see [quota.Settler]), in the store that granted it. It reports the
// settlement to the hooks and returns the error it reports.
func (lim *Limiter) settle(ctx context.Context, r *rule, d *demand, cost int) error {
	lim.awaitShorten(d) // shorten.go: the entry is where the shortening put it
	ev := SettleEvent{Context: ctx, Rule: r.id, Charged: d.Cost, Cost: cost}
	if cost < 1 {
		ev.Err = fmt.Errorf("throttle: rule %s: %w: a settled cost must be at least 1, got %d", r.id, ErrInvalidPolicy, cost)
	} else {
		costs := make([]int, len(d.Limits))
		for i := range d.Limits {
			if d.Limits[i].Cost == 0 { // charged d.Cost, the estimate
				costs[i] = cost
			}
		}
		if err := lim.settleCharge(ctx, d.granted, costs); err != nil {
			ev.Err = fmt.Errorf("throttle: rule %s: store: settle: %w", r.id, err)
		}
	}
	lim.settleEvent(ev)
	return ev.Err
}

// settleEvent reports ev to the hook and the log.
func (lim *Limiter) settleEvent(ev SettleEvent) {
	if lim.hooks.OnSettle != nil {
		lim.hooks.OnSettle(ev)
	}
	lim.logSettle(ev)
}

// settleCharge settles res in the store that granted it: the local
// fallback store, or the shared store through the breaker.
func (lim *Limiter) settleCharge(ctx context.Context, res *quota.Reservation, costs []int) error {
	if lr, ok := localReservation(res); ok {
		return lim.failover().local.Settle(ctx, lr, costs)
	}
	s, ok := lim.store.(quota.Settler)
	if !ok {
		return fmt.Errorf("the store (%T) cannot settle: it does not implement quota.Settler", lim.store)
	}
	return lim.guard(ctx, func(ctx context.Context) error { return s.Settle(ctx, res, costs) })
}

// SettleFromJSON returns a [Rule].Settle that reads the cost from the
// JSON response body at path, a dot-separated list of object keys:
// "data.rateLimit.cost" for GitHub GraphQL (whose query must ask for
// rateLimit { cost }), "usage.total_tokens" for an OpenAI-style chat
// completion. The value must be a number; a fraction is rounded up. It
// reports no cost when the body is not JSON, or has no number there.
func SettleFromJSON(path string) func(*http.Response) (cost int, ok bool) {
	keys := strings.Split(path, ".")
	return func(resp *http.Response) (int, bool) {
		if resp.Body == nil {
			return 0, false
		}
		dec := json.NewDecoder(resp.Body)
		for _, k := range keys {
			if !enterKey(dec, k) {
				return 0, false
			}
		}
		var raw json.RawMessage // a number, not a string holding one
		if dec.Decode(&raw) != nil {
			return 0, false
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int(math.Ceil(f)), true
	}
}

// enterKey reads the start of a JSON object from dec and its entries up
// to key, and reports whether it found it: dec then reads its value.
func enterKey(dec *json.Decoder, key string) bool {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		if k, _ := t.(string); k == key {
			return true
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
