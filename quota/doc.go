// Package quota is the contract between the throttle package and the
// stores that decide its limits, as database/sql/driver is to database/sql.
// A user of throttle needs it only to write a store, or to call one
// directly; everything else meets it through throttle.Transport.
//
// A [Store] decides a [Demand]: every [Bucket] (a [Limit] and the key of
// its counter) it must pass, its cost, and how long it may wait. The answer
// is a [Decision]: granted now, granted after a delay (a [Reservation]), or
// refused with nothing charged and the time until it can succeed. Optional
// interfaces add what only some stores do: [LeaseStore] (in-flight
// [Concurrency] limits), [Syncer] (lowering a counter to the vendor's
// count), [Anchorer] (moving a limit's windows to where the vendor's
// start), [Settler] (correcting a charge to the cost the vendor reports
// after the fact), [Retimer] (moving a charge to the instant a late grant
// is acted on), [Shortener] (ending a sliding log entry's count when the
// vendor's window that holds it ends), [Inspector] (reading and resetting live state, for operators)
// and [LimitChecker] (a store that can decide only some demands says so at
// start-up).
//
// Package memstore is the in-process store, and redisstore the one shared
// through Redis. Both pass storetest's conformance suite, which is the
// precise statement of the semantics of this package.
//
// This package imports nothing else of the module.
package quota
