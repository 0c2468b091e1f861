// Package quotamath is the arithmetic of every [quota.Algorithm], written
// once in Go: the in-process store (memstore), the conformance suite's
// reference model (storetest) and the Redis store's inspection call it.
// The Redis store's Lua scripts are the only other copy; the differential
// and conformance tests compare them with this one.
//
// Instants are integer microseconds of a store's clock, and every value
// is an integer, so decisions are exact and the same in every store.
// Values must also stay exact in the Redis store's Lua, whose numbers are
// doubles (integers exact to 2^53): no formula here multiplies Per by
// Rate. The bounds of [quota.Limit.Validate] (Rate and Burst at most
// 10^12, one unit per nanosecond, Per and Burst*P/R at most 100 years)
// keep every instant, span, count and weighted count below 2^53; the few
// products that would pass it (n*P for GCRA, the arrival time over T for
// inspection) are taken in 128 bits in Go ([Limit.Emissions]), which
// hands Lua only their quotient and remainder. The functions are pure:
// state goes in as arguments, results come out, nothing is kept.
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
// The emission interval is T = P/R microseconds per unit of cost,
// exactly: the arrival time TAT is a [Time], whole microseconds plus a
// remainder Frac in units of 1/R µs (0 <= Frac < R), and n intervals
// are floor(n*P/R) µs plus (n*P mod R)/R ([Limit.Emissions]). Sums carry
// the remainder into the microseconds, so no charge is rounded: a limit
// admits exactly B + R*d/P units over any interval of length d, never one
// more. Frac is 0 when R divides P ([Limit.Exact]): those limits keep
// whole microseconds, as versions before it did.
//
//   - admitted at t:  max(TAT, t) + c*T - t <= B*T
//   - earliest:       max(t, ceil(TAT - (B-c)*T))
//   - charged at t:   TAT' = max(TAT, t) + c*T            ([Limit.GCRACharge])
//   - refunded:       TAT' = TAT - c*T, only while TAT is still what the
//     charge set, told by its mark                        ([Limit.GCRARefund])
//   - marked:         the arrival time in nanoseconds, rounded up,
//     Micros*1000 + ceil(1000*Frac/R): at one unit per nanosecond at most,
//     every later grant changes it                         ([Limit.Mark])
//   - synced to left units within w: TAT' = max(TAT, now + w + (B-left)*T)
//     ([Limit.GCRASync])
//   - settled at delta units more (or fewer) than charged: TAT' =
//     max(TAT, now) + delta*T, until Per after the charge's own arrival
//     time                                                ([Limit.GCRASettle],
//     [Limit.SettleEnd])
//   - retimed to now: unchanged while mark - c*T >= now (in nanoseconds,
//     the mark taken 1 ns lower and c*T rounded up:   [Limit.GCRAKeeps]);
//     else refunded and charged at now while the mark is the bucket's,
//     or charged at now when TAT <= now
//   - inspected at now: Used = min(ceil((TAT-now)/T), B), Remaining = B -
//     Used, Reset = ceil(TAT) - now, when TAT > now
//
// The Redis store keeps TAT as the decimal "Micros" when Frac is 0, else
// "Micros:Frac", and receives each n*T from Go the same way.
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
// prev*(P-e)/P + cur (prev and cur the counts of windows k-1 and k). The
// weight of prev falls in steps of s µs, W = ceil(P/s) to a window
// ([Limit.Steps]): s = 1 and W = P (the exact weight) while P*R <= 2^52,
// else the least s with W*R <= 2^52. With j = floor(e/s) steps elapsed,
// a demand is admitted when prev*(W-j) <= (R-cur-c)*W, both sides at
// most R*W <= 2^52, in integers. In a window where room = R - cur - c >=
// 0, the least such j is W - floor(room*W/prev) (0 when prev is 0); when
// that is below W the window admits from F + k*P + j*s. Inspection rounds
// the estimate up: Used = cur + ceil(prev*(W-j)/W).
//
// The resolution is the step: s = 1 µs for any rate a second, up to 75
// million a minute, 1.25 million an hour or 52,000 a day; about P*R/2^52
// µs above (20 µs at 10^6 a day, 0.6 s at 10^9 per 31 days). The stepped
// weight, (W-j)/W, is never below the exact (P-e)/P and at most 2/W
// above it, so the estimate counts at most 2*prev/W units too many (444
// at 10^9 per 31 days) and never too few.
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
// instant. A demand at t is admitted when every window of length P that
// would hold it, (x-P, x] for x in [t, t+P), holds at most R-c: the
// window ending at t ([LogCost]), and the windows ending at the entries
// (reservations) after t and before t+P. The earliest instant is t or an
// instant at which an entry leaves the window (its instant plus P), and
// comes after every entry whose window is too full; it is found in one
// pass over the entries after t-P, and the entry goes in order, before
// later reservations. Inspection reports the cost recorded after now-P. A settlement
// gives the charge's entry its new cost, until it leaves the log.
//
// A demand with a [quota.LogExpiry] (a grid of windows of G = Every whose
// ends lie in [F, F+S] modulo G, and a reach a) puts its entry at E-P,
// where E is the latest end of a grid window that may hold t+a
// ([Limit.LogEnd]: E = t+a+G-d with d = (t+a-F-S) mod G, or t+a+G when
// d+S >= G), and is admitted at t when the windows ending in [t, E) hold
// at most R-c: the window ending at t and those ending at the entries in
// (t, E). E never decreases with t, so the same pass finds the earliest
// instant. The mark is the entry's instant, as without an expiry.
//
// # Concurrency
//
// At most R leases are live (expiry after now). When R or more are, a
// slot frees by expiry alone at the (n-R+1)th smallest of the n expiries
// ([Limit.SlotFreeAt]).
package quotamath
