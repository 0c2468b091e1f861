package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Store keeps the state of limits and pauses and makes every decision
// about them. The throttle Transport asks its Store once per matched
// request.
//
// The in-process store (package memstore) is the default; the redisstore
// package provides a Store shared by every instance of a service through
// Redis. Both pass the same conformance suite (package storetest), which is
// the precise statement of the semantics below.
//
// # Semantics
//
// Take decides all limits of a [Demand] in one atomic step. It computes the
// earliest instant t, not before the store's current time, at which every
// limit of the demand admits the demand's cost and no listed pause is in
// force. Then:
//
//   - if t is now, the demand is granted and charged: Decision.OK is true and
//     Decision.Delay is 0;
//   - if t is later but no more than Demand.MaxWait from now, the demand is
//     granted as a reservation: every limit is charged for instant t, so the
//     quota is held for the caller, who must wait Decision.Delay before it
//     acts;
//   - otherwise the demand is refused and NOTHING is charged: Decision.OK is
//     false, Decision.Delay is the time until t (the earliest instant a
//     retry can succeed, rounded up, never early), and Decision.Limit names
//     what bound it.
//
// All limits are charged or none is. Stores keep time in whole microseconds
// of their own clock (Redis's TIME for the Redis store); they receive
// durations, never instants, so clock skew between instances cannot matter.
//
// A demand whose cost exceeds what a limit can ever admit (more than Burst
// for GCRA, more than Rate for the window algorithms) is an error wrapping
// [ErrCostTooHigh]; it is never a wait without end.
//
// # Concurrency limits
//
// A [Concurrency] limit is not a rate: its slot frees when its holder
// releases it, at an instant the store cannot know. Only stores that
// implement [LeaseStore] accept it. Take finds t from the other limits and
// the pauses as above, and then:
//
//   - if t is more than MaxWait away, the demand is refused as above,
//     bound by one of those limits or a pause;
//   - otherwise, if a Concurrency limit has no free slot now (all Rate
//     slots are held by leases that expire after now), the demand is
//     refused with nothing charged, Decision.Limit names that limit, and
//     Decision.Delay is the time until max(t, e), where e is the instant
//     at which, if no holder releases its slot or renews its lease, the
//     leases have expired far enough for a slot to be free. Delay is then
//     an upper bound, not the earliest instant: a release may free a slot
//     at any moment. A caller that may wait waits for a release (see
//     [LeaseStore.WatchRelease]) or Delay, whichever comes first, and
//     asks again;
//   - otherwise, if t is now, the demand is granted and each Concurrency
//     limit also gets a lease on one slot, held from now until now+Per;
//   - otherwise (t is later) the demand is granted as a reservation that
//     charges the other limits for t and takes NO slot:
//     Reservation.Unclaimed is true. A request that waits for its instant
//     holds no slot while it waits, so other requests sharing the slot
//     (another rule's, say) go meanwhile. When the reservation comes due,
//     its holder takes the slots with [LeaseStore.Claim], all or none. If
//     a slot is not free then, the holder must not act late on its old
//     charge (a window charged for t does not cover a later instant): it
//     cancels the reservation and asks again. A free slot is required at
//     Take even for a reservation, so that a demand queued behind busy
//     slots does not hold rate quota it may not be able to use.
//
// A Concurrency limit takes one slot whatever Demand.Cost is. Cancel of a
// reservation gives its slots back too; Cancel of an unclaimed one gives
// back the other charges (and a lease that a Claim of it whose answer was
// lost may have taken).
//
// # Headroom and fair shares
//
// Two fields of a [Bucket] let traffic of different importance share a
// limit. A Headroom keeps part of a limit free for demands with a smaller
// one (throttle's priority classes); a Tenant shares a limit fairly among
// the tenants of its counter. A demand that has a headroom or a tenant on
// any limit is restricted: it is granted as a reservation only for an
// instant at most T/2 ahead of now, T the least emission interval
// Per/Rate of its limits other than Concurrency (in µs, rounded up, then
// halved and rounded up; 0 if it has none), as if its MaxWait were at
// most T/2. If it cannot act by then it is refused with nothing charged,
// and Delay is the time until it could; its caller waits that long and
// asks again. So a restricted demand never holds quota more than half an
// emission interval ahead, which a demand arriving after it would have to
// queue behind, and it still takes most freed units at their instant. [Bucket.Headroom] gives
// the arithmetic of a headroom.
//
// # Lent headroom
//
// On a FixedWindow, SlidingWindow or SlidingLog limit a headroom is held
// only while a higher class uses the counter, and lent otherwise: a store
// keeps, for each such counter, the instant at which it last decided a
// demand of each headroom, noted for the demands with a Headroom or
// marked [Bucket.Classed], granted or not. With T = Per/Rate (rounded up
// to the µs), a demand with headroom h > 0 sees the limit less h when a
// demand with a smaller headroom was noted in (now-T, now], and the whole
// limit otherwise. Refused while its headroom is held, its Delay is the
// time until the limits admit it with the headroom, or, if sooner, until
// the first instant (not before its pauses end) at which the latest such
// note on a limit holding it is T old: the headroom may then be lent (a
// later note holds it again). A higher class that returns after T finds the
// headroom lent: it is not refused for it, it reserves the first instant
// the limit frees (a demand without a headroom may be a reservation), and
// the lower classes, which never hold a reservation, see the headroom
// held from its note on. GCRA and Concurrency limits hold a headroom
// always: on GCRA it is the top of the burst and costs no rate, and a
// slot lent could not be taken back before its release.
//
// # Fair shares
//
// Buckets with a [Bucket.Tenant] share their counter among tenants. With
// P the limit's Per, T = P/Rate and C its capacity (Burst for GCRA, Rate
// otherwise), a store keeps for each such counter (share clocks count
// whole microseconds: c*T, C*T and T below are each rounded up):
//
//   - its active tenants: those named by a demand on it decided in
//     (now-P, now], granted or not; n is their number, the deciding
//     demand's tenant included;
//   - a share clock V per tenant, an instant (0 at first). A demand's
//     place is that of its tenant's live claim, if it has one, else
//     max(V, now): the lower, the further its tenant is below its share,
//     or the longer it has waited;
//   - claims: a tenant whose demand is refused with a Delay within
//     MaxWait (it will ask again) holds a claim on the counter, for the
//     instant now + Delay, at the demand's place. The claim lives until
//     max(T, 250ms) after its instant, so that its holder may come back
//     a round trip and a loaded machine's scheduling late. Granting a
//     demand of the tenant drops its claim.
//
// A demand is held back on a limit while another tenant holds a live
// claim at a lower place: it is refused until T after the latest instant
// of those claims, or T after now if that is later (their holders are
// late), or until the limits admit it, if that is later still, or the
// earliest instant after that at which they do (a sliding log may admit
// a demand now and not a moment later, when a reservation's window would
// hold it); and Limit names the shared limit. When a demand is granted
// for the instant t, its tenant's clock on each shared limit becomes
// min(max(V, t), t + C*T) + c*n*T, c being its cost on that limit (c*n*T
// at most 2^50 µs). A refusal charges nothing, but makes its tenant
// active and may give it a claim.
//
// So the free quota goes to the waiting tenant with the lowest place,
// the one furthest below its share, as in fair queueing: a tenant that
// asks for less than its share, Rate/n, is served when the limit next
// frees, behind the other such tenants that asked before it (a wait of
// about one emission interval per tenant ahead of it, plus a round
// trip), and the tenants that ask for more share what the others leave
// in turns of c*n*T. A tenant alone (n = 1) may use the whole limit, and
// a tenant that was idle may run ahead of the others by up to C*T, a
// burst of C/n units. The share is exact only while n stays the same (a
// grant counts with the n of its decision); a claim whose holder does not
// come back lapses; Cancel and Settle do not move a clock.
//
// Implementations must be safe for concurrent use. An error from Take means
// the demand may or may not have been charged; callers treat it as not
// granted.
type Store interface {
	// Take decides d atomically: granted now, granted after a delay (a
	// reservation), or refused with nothing charged.
	Take(ctx context.Context, d *Demand) (Decision, error)

	// Cancel gives back what a granted decision charged, as far as that is
	// safe for others (see [Reservation]). Call it only when the action the
	// reservation was for will not happen.
	Cancel(ctx context.Context, r *Reservation) error

	// Pause records that scope's pause key must not act for the duration
	// d, counted from the store's current time. A pause never shortens an
	// existing one. A non-positive d is a no-op.
	Pause(ctx context.Context, scope, key string, d time.Duration) error
}

// A Demand is what one request asks of a [Store]: every limit it must pass,
// the cost it is charged, and how long it may wait.
type Demand struct {
	// Scope groups the counters and pauses of a decision. The Redis store
	// keeps all keys of one scope in one Cluster slot. The Transport sets it
	// to the matched rule's scope (throttle.Rule.Scope).
	Scope string

	// Limits are decided together: all admit, or none is charged. Each
	// counter (limit name and key) may appear once; stores reject a
	// demand that names one twice ([Demand.Validate]).
	Limits []Bucket

	// Pauses lists the pause keys of Scope that hold this demand back; a
	// pause set with [Store.Pause] on any of them delays the demand.
	Pauses []string

	// Cost is how much the demand takes from every limit whose
	// Bucket.Cost is zero. It must be at least 1.
	Cost int

	// MaxWait is the longest the caller is willing to wait for its quota.
	// Zero means the demand is granted only if it can act now; a negative
	// value is treated as zero.
	MaxWait time.Duration
}

// Validate checks what every store requires of a demand before it decides
// it: a cost of at least 1, valid limits, no counter (limit name and key)
// named twice, and a cost that every limit can admit at once. A problem
// with a field is a [*FieldError] (matching [ErrInvalid]); a cost above a
// limit's capacity wraps [ErrCostTooHigh].
func (d *Demand) Validate() error {
	if d == nil {
		return &FieldError{Field: "Demand", Err: errors.New("must not be nil")}
	}
	if d.Cost < 1 {
		return &FieldError{Field: "Cost", Err: fmt.Errorf("must be at least 1, got %d", d.Cost)}
	}
	for i := range d.Limits {
		l := d.Limits[i].Limit
		if field, err := l.check(); err != nil {
			return &FieldError{Field: fmt.Sprintf("Limits[%d].%s", i, field), Err: err}
		}
		for j := range i {
			if d.Limits[j].Limit.Name == l.Name && d.Limits[j].Key == d.Limits[i].Key {
				return &FieldError{Field: fmt.Sprintf("Limits[%d]", i),
					Err: fmt.Errorf("same counter as Limits[%d] (limit %s, same key): a demand charges each counter once", j, l.Name)}
			}
		}
		if c := d.Limits[i].Cost; c < 0 {
			return &FieldError{Field: fmt.Sprintf("Limits[%d].Cost", i), Err: fmt.Errorf("must not be negative, got %d", c)}
		}
		if c, cost := l.Capacity(), d.CostOf(i); cost > c {
			return fmt.Errorf("%w: limit %s admits at most %d at once, demand costs %d", ErrCostTooHigh, l.Name, c, cost)
		}
		if err := d.checkShare(i); err != nil {
			return err
		}
		if field, err := d.Limits[i].Expiry.check(l); err != nil {
			return &FieldError{Field: fmt.Sprintf("Limits[%d].%s", i, field), Err: err}
		}
	}
	return nil
}

// CostOf returns what the demand charges to its limit i: Limits[i].Cost,
// or Cost when that is zero. A [Concurrency] limit takes one slot
// whatever its cost.
func (d *Demand) CostOf(i int) int {
	if c := d.Limits[i].Cost; c > 0 {
		return c
	}
	return d.Cost
}

// SlotsOnly reports whether every limit of the demand, and at least one,
// is a [Concurrency] limit: only then does [Decision.Remaining] count
// free slots.
func (d *Demand) SlotsOnly() bool {
	for i := range d.Limits {
		if d.Limits[i].Limit.Algorithm != Concurrency {
			return false
		}
	}
	return len(d.Limits) > 0
}

// A Bucket is one limit resolved for one request: the limit's parameters
// and the key of the counter it is charged to. Buckets with the same scope,
// limit name and key share one counter.
type Bucket struct {
	// Limit gives the name and parameters (Rate, Per, Burst, Algorithm).
	Limit Limit

	// Key identifies the counter within the limit. The Transport passes keys
	// already escaped: they contain only the bytes [A-Za-z0-9._~%:@+=-] and
	// are at most 128 bytes long.
	Key string

	// Cost is what the demand charges to this limit; zero means
	// Demand.Cost. Limits of one demand may cost different amounts (a
	// write costs 5 points of one limit and 1 of another); they are still
	// decided together, all charged or none.
	Cost int

	// Headroom is how much of the limit the demand must leave free: it is
	// admitted only if, after its cost c, at least Headroom units are
	// still free; on the window and log algorithms only while a demand
	// with a smaller headroom is active (see [Store], Lent headroom).
	// GCRA admits c at t when max(TAT, t) + c*T - t <= (B-Headroom)*T;
	// FixedWindow, SlidingWindow and SlidingLog when their count
	// (estimate, logged cost) plus c is at most Rate-Headroom; a
	// Concurrency limit when more than Headroom slots are free. A demand
	// with a headroom on any limit is restricted: a reservation at most
	// T/2 ahead (see [Store]). Headroom plus the cost may not exceed the limit's capacity
	// (its Rate slots, for a Concurrency limit): that is [ErrCostTooHigh].
	// Zero means none.
	Headroom int

	// Classed marks a demand of a priority class without a Headroom (the
	// top class): a store notes it on the counter, so that the headroom
	// of the lower classes is held for it (see [Store], Lent headroom). A
	// demand with a Headroom is noted whether or not it is Classed.
	Classed bool

	// Tenant, if not empty, is who the demand is for: the counter is
	// shared fairly among the tenants that use it (see [Store]), so that
	// none gets more than its share while another is held back. A
	// [Concurrency] limit cannot be shared.
	Tenant string

	// Expiry, on a [SlidingLog] limit, scores the demand's entry by the
	// windows of a grid (a vendor's) instead of by its instant: see
	// [LogExpiry]. The zero value keeps the log's own rule. Other
	// algorithms must leave it zero.
	Expiry LogExpiry
}

// A Decision is a [Store]'s answer to a [Demand].
type Decision struct {
	// OK reports whether the demand was granted and charged.
	OK bool

	// Delay is, when OK, how long the caller must wait before it acts
	// (zero: act now). When not OK, it is the time until the earliest
	// instant at which the same demand could succeed, rounded up to the
	// microsecond; except when Limit names a [Concurrency] limit, where it
	// is the time until a slot frees by lease expiry alone, an upper bound
	// that any release beats (see [Store]).
	Delay time.Duration

	// Limit is, when not OK, the index in Demand.Limits of a limit that
	// bound the decision, or -1 when a pause bound it. When OK it is -1.
	Limit int

	// Pause is, when not OK and a pause bound the decision, the pause key
	// that did.
	Pause string

	// Reservation describes what was charged, for [Store.Cancel]. It is nil
	// when the decision was refused.
	Reservation *Reservation

	// Remaining is, when the demand is granted at once (OK, Delay 0), how
	// much its limits still admit now, after its charge: the least, over
	// its limits other than Concurrency, of [LimitState.Remaining] less
	// the limit's [Bucket.Headroom], not below 0, which is what a demand
	// like it may still take of its quota. A Concurrency limit's free
	// slots count only in a demand of Concurrency limits alone (a slot
	// frees when it is released, not with time: as for ResetAfter, they
	// say nothing of the quota). It is 0 for a reservation (Delay > 0),
	// for a refusal, and for a demand without limits.
	Remaining int64

	// ResetAfter is, when the demand is granted, how long until what it
	// charged stops counting against its limits, the longest over them:
	// for GCRA until the bucket is full again (its arrival time), for
	// FixedWindow until the end of the window charged, for SlidingWindow
	// until the end of the window after it (which weighs it as its
	// previous), for SlidingLog until Per after its entry's instant (the
	// charged instant, or as its Bucket.Expiry places it). A
	// Concurrency slot frees when it is released, so those limits do not
	// count. It is 0 for a refusal (see Delay).
	ResetAfter time.Duration

	// At is, when the demand is granted, the store's clock at the
	// decision: a grant for now is charged at At, one for later at At plus
	// Delay. The zero time means the store does not say. A Limiter uses it
	// to tell a reply that came late after its charge (which a vendor
	// counting on arrival sees late) from a call that was slow before the
	// store decided (which moves the charge with it).
	At time.Time
}

// A Reservation records what a granted [Decision] charged, so that
// [Store.Cancel] can give it back. Its contents are the store's own.
//
// What Cancel gives back depends on the algorithm: a fixed-window,
// sliding-window or sliding-log charge is always returned in full; a GCRA
// charge is returned only if no later demand has been granted on the same
// bucket since (as with golang.org/x/time/rate's Reservation.Cancel, a later
// reservation sits on time this one made it skip).
type Reservation struct {
	// Demand is the demand that was granted.
	Demand *Demand

	// Marks hold, per limit of Demand, the store's record of the charge
	// (for example the GCRA theoretical arrival time it set, the window
	// it charged, or a lease's expiry), in the store's own units.
	Marks []int64

	// ID identifies the charge, where the store needs one (for example a
	// sliding-log member; a [Settler] gives every reservation one, to
	// remember what it was settled to). It is the lease id of every
	// [Concurrency] slot the charge holds, unique among all leases of the
	// store.
	ID string

	// Unclaimed reports a reservation of a demand with [Concurrency]
	// limits that holds none of their slots yet: Take granted it for a
	// later instant and charged only the other limits. Its holder waits
	// Decision.Delay, then takes the slots with [LeaseStore.Claim]; until
	// then the Concurrency marks are 0 and Release does nothing.
	Unclaimed bool
}

// A LeaseStore is a [Store] that implements [Concurrency] limits: it holds
// each granted slot as a lease with an id (the reservation's ID) and an
// expiry, and lets the holder claim (for a reservation), renew and release
// it. The Transport requires one when a rule has a Concurrency limit. Both
// stores of this module are LeaseStores.
//
// A request that must wait for its rate quota holds no slot while it
// waits: Take charges the rate limits for the reserved instant and leaves
// the slots unclaimed, and the Transport claims them when the instant comes,
// just before it sends. A request is therefore never sent without both its
// rate charge having come due and its slots held.
//
// Leases make slots crash-safe without any heartbeat process: a holder
// that dies stops renewing, and its slot is free again when the lease
// expires. Ids make release idempotent: releasing a lease that is gone
// (released before, cancelled, or expired and pruned) does nothing, so a
// slot is never freed twice.
type LeaseStore interface {
	Store

	// Release frees the Concurrency slots of r, a reservation granted by
	// Take or Claim. It does not give back what r charged to other limits.
	// Releasing again, after Cancel, or an unclaimed reservation does
	// nothing. A store may return before the slots are free, to send the
	// release with a later call (redisstore does, so that an in-flight
	// limit costs one round trip per request): it must then free them
	// promptly, and a Take or Claim of the same scope that the same store
	// value sends after Release returned must see them free. Such a
	// store also offers Flush(ctx) error, which sends what is held back
	// (before a shutdown, or before another store value must see it; the
	// conformance suite calls it). An error means the slots may stay held
	// until their leases expire.
	Release(ctx context.Context, r *Reservation) error

	// Claim takes the Concurrency slots of r, an unclaimed reservation
	// (Reservation.Unclaimed) granted by Take, once it has come due. It
	// takes one slot of every Concurrency limit of r's demand, all or
	// none, in one atomic step: if each has a free slot now, each gets a
	// lease with id r.ID from now until now+Per, and the decision is
	// granted (OK, Delay 0; Remaining and ResetAfter zero) with a
	// Reservation that is a copy of r holding the slots (Unclaimed false,
	// the leases' expiries as marks): release,
	// renew or cancel that one. Otherwise it takes nothing and refuses:
	// Decision.Limit is the index in the demand of a limit with no free
	// slot and Delay the time until lease expiry alone frees one, an
	// upper bound as for Take. Claim does not decide the other limits or
	// the pauses again (Take charged them for r's instant) and never
	// modifies r, which stays valid: the caller cancels it or claims
	// again. Claiming a reservation whose leases are already held takes
	// no further slot; claiming one that is not Unclaimed returns it as
	// granted.
	Claim(ctx context.Context, r *Reservation) (Decision, error)

	// Renew extends the leases of r's Concurrency slots to Per from the
	// store's current time; it never shortens one. If a lease is gone
	// (it expired, or was released), Renew returns an error wrapping
	// [ErrLeaseLost] and does not take the slot again, since another
	// demand may hold it by now.
	Renew(ctx context.Context, r *Reservation) error

	// WatchRelease arms a watch on the Concurrency bucket b of scope: after
	// it returns, the channel receives a value when a slot of b may have
	// been freed by a release or cancel, anywhere (every instance sharing
	// the store). A release wakes at most one watcher per process, in the
	// order they started watching, so waiters do not stampede. Wake-ups may
	// be lost (a dropped connection, say) and leases that expire send
	// nothing, so a watcher also waits on a timer (Decision.Delay). stop
	// ends the watch and must be called once. A store without
	// notifications may return a nil channel.
	WatchRelease(ctx context.Context, scope string, b Bucket) (wake <-chan struct{}, stop func(), err error)
}

// A LimitChecker is a [Store] that can decide only some demands as written
// (redisstore's MULTI/EXEC store: fixed windows only, and no waiting). The
// Transport asks it about every rule when it is built and fails with the
// first problem, so a mismatch shows at start-up rather than as refusals.
type LimitChecker interface {
	// CheckLimits returns nil if the store can decide demands on limits, waiting
	// up to their MaxWait if mayWait, or a [*FieldError] naming the field
	// it cannot honour ("Limits[1].Algorithm", or "Wait" when it cannot
	// wait).
	CheckLimits(limits []Limit, mayWait bool) error
}
