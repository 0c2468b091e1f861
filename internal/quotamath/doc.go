// Package quotamath is the arithmetic of every [quota.Algorithm], written
// once in Go: the in-process store (memstore), the conformance suite's
// reference model (storetest) and the Redis store's inspection call it.
// The Redis store's Lua scripts are the only other copy; the differential
// and conformance tests compare them with this one.
//
// Everything is in integer microseconds of a store's clock, so decisions
// are exact and the same in every store. [quota.Limit.Validate] keeps
// P*max(R, B) below 2^53, so no product here overflows, and Lua's doubles
// hold every value exactly. The functions are pure: state goes in as
// arguments, results come out, nothing is kept.
//
// # Notation
//
// P is Per in microseconds, R is Rate, B is Burst (Rate when zero), F is
// the phase of the windows, c is the cost of a demand and t the instant
// it is decided for. A [Limit] holds the algorithm, P, R, B and F ([Of]
// makes one from a [quota.Limit]; an Anchored limit's F is the counter's,
// [Limit.WithPhase]);
// a [Counter] holds one counter's state. [Limit.Admits],
// [Limit.Earliest] and [Limit.State] apply the formulas below, by
// algorithm; the rest of the functions are the steps a store takes
// between decisions.
//
// # GCRA
//
// The emission interval is T = ceil(P/R) microseconds per unit of cost;
// rounding up means a limit never admits faster than R per P. The state
// is the theoretical arrival time TAT.
//
//   - admitted at t:  max(TAT, t) + c*T - t <= B*T
//   - earliest:       max(t, TAT + c*T - B*T)
//   - charged at t:   TAT' = max(TAT, t) + c*T            ([Limit.GCRACharge])
//   - refunded:       TAT' = TAT - c*T, only while TAT is still what the
//     charge set                                          ([Limit.GCRARefund])
//   - synced to left units within w: TAT' = max(TAT, now + w + (B-left)*T)
//     ([Limit.GCRASync])
//   - settled at delta units more (or fewer) than charged: TAT' =
//     max(TAT, now) + delta*T, until Per after the charge's own arrival
//     time                                                ([Limit.GCRASettle],
//     [Limit.SettleEnd])
//   - inspected at now: Used = min(ceil((TAT-now)/T), B), Remaining = B -
//     Used, Reset = TAT - now, when TAT > now
//
// # FixedWindow
//
// Window k covers [F + k*P, F + (k+1)*P), so the window of t is
// floor((t-F)/P), rounded toward negative infinity for instants before
// the epoch ([Limit.Window], [Limit.Start]). A demand is admitted while
// count(k) + c <= R; the earliest instant is t in its own window, or the
// start of the first later window with room. Inspection reports count(k),
// until the window ends. A settlement moves count(k) by the difference,
// never below 0, until the window ends (for SlidingWindow, until the next
// one ends).
//
// A sync of left units within w ([Limit.SyncWindows]) raises to R-left
// the count of the last window that starts before now+w, and fills
// (count R) every window from the one of now up to it.
//
// # SlidingWindow
//
// At t in window k, with e = t - (F + k*P) elapsed, the estimate is
// prev*(P-e)/P + cur (prev and cur the counts of windows k-1 and k). A
// demand is admitted when prev*(P-e) + (cur+c)*P <= R*P, in integers. In
// a window where cur + c <= R, the least such e is
// P - floor((R-cur-c)*P/prev) (0 when prev is 0); when that is below P
// the window admits from k*P + e. Inspection rounds the estimate up:
// Used = cur + ceil(prev*(P-e)/P).
//
// # Anchoring
//
// An Anchored window counter starts with F = the instant of its first
// charge modulo P, and keeps, per window, Last: the latest instant at
// which a unit charged to it may be sent. A vendor window ending at E
// moves F to E mod P when that is further than the tolerance from F,
// either way, modulo P ([Limit.AnchorMoves]). The units of old window k
// lie in [Start(k), min(Start(k+1)-1, max(now, Last))], and each new
// window meeting that span counts them all ([Limit.Reanchor]).
//
// # SlidingLog
//
// The log holds every admitted demand's instant and cost, in order of
// instant. A demand at t is admitted when t is not before the latest
// entry and the cost recorded in (t-P, t] plus c is at most R
// ([LogCost]). The earliest instant drops the oldest entries of the last
// P one by one, each leaving the window at its instant plus P, until c
// fits. Inspection reports the cost recorded after now-P. A settlement
// gives the charge's entry its new cost, until it leaves the log.
//
// # Concurrency
//
// At most R leases are live (expiry after now). When R or more are, a
// slot frees by expiry alone at the (n-R+1)th smallest of the n expiries
// ([Limit.SlotFreeAt]).
package quotamath
