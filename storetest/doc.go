// Package storetest is the conformance suite for implementations of
// [quota.Store]: the precise, executable statement of the semantics
// documented on [quota.Store] and [quota.Algorithm]. The in-process
// store (package memstore) and the Redis store (package
// redisstore) both pass it, and so must any third-party Store.
//
// # Using the suite
//
// Call [Run] from a test of your store's package and give it a
// constructor. The suite hands each store a fake clock ([Clock]); the
// store must read its time from it, in whole microseconds
// (now().UnixMicro()), and from nowhere else:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Config{
//			New: func(t *testing.T, now func() time.Time) quota.Store {
//				return mystore.New(client, mystore.WithClock(now))
//			},
//			// For a shared backend: n stores with separate clients.
//			Instances: func(t *testing.T, now func() time.Time, n int) []quota.Store {
//				...
//			},
//		})
//	}
//
// A store whose production clock lives in its backend (Redis's TIME, say)
// needs a test-only way to take the time from now instead.
//
// Every case runs in its own parallel subtest with its own
// [quota.Demand.Scope] (derived from the test's name and a per-run
// nonce, at most 64 bytes of [A-Za-z0-9._-]), so all cases may share one
// backend; New may return stores on the same server. No case sleeps:
// time moves only through the fake clock, which starts at [Start], an
// instant aligned to every period the cases use.
//
// # What it checks
//
//   - Each algorithm's integer-microsecond math as step rows: admissions
//     up to the limit, the exact Delay of a refusal, and that it is never
//     early (refused 1µs before it, admitted at it); window boundaries
//     aligned to the epoch, the sliding-window estimate, sliding-log
//     expiry, costs above 1; odd and long periods.
//   - All-or-nothing demands over several limits, which limit is reported
//     as binding, shared and independent counters.
//   - Reservations (MaxWait > 0) at the earliest instant all limits and
//     pauses allow, and Cancel's refunds.
//   - Large and awkward quotas counted exactly (10^9 per 31 days, 10^7
//     and 3*10^6 a second, 7 per 3 s): GCRA fractions of a microsecond
//     that add up, refunds and syncs that keep them, the sliding window's
//     weight steps; and the share of such a quota one greedy client gets
//     on the advanced clock: at least 99.9%, never more than the quota.
//   - Pauses, and errors: [quota.ErrCostTooHigh], costs below 1, limits
//     beyond [quota.Limit.Validate]'s bounds.
//   - Headrooms ([quota.Bucket].Headroom) on every algorithm: what they
//     leave free, held for T after a class above asks and lent otherwise
//     on the windows and the log, that such a demand is a reservation at
//     most T/2 ahead, Remaining less the headroom; fair shares
//     (Bucket.Tenant): a tenant alone uses the whole limit, claims at a
//     lower place (further below its share, or waiting longer) go first
//     and lapse 250ms after their instant.
//   - For a [quota.LeaseStore]: [quota.Concurrency] slots as
//     leases (release, renew, expiry, all or nothing with rate limits); a
//     reservation that holds no slot until [quota.LeaseStore.Claim]
//     takes its slots, all or none; Cancel of claimed and unclaimed
//     reservations; exact slot and claim counts under contention; release
//     wake-ups.
//   - For a [quota.Inspector]: the live state of every algorithm and
//     of pauses, read without charging anything; ResetLimit and
//     ClearPause.
//   - For a [quota.Settler]: settlements of every algorithm as step rows
//     (refunds, extra charges and debts, settling twice, charges that no
//     longer count, per-limit costs, claimed reservations, bad costs),
//     the exact sum of settlements racing on one store and on instances,
//     and settlements in the differential test (its even seeds, whose
//     invariants skip the buckets a settlement changed).
//   - Exact admitted counts under contention (64 goroutines; with
//     Config.Instances, also 8 instances of 8 goroutines), and
//     concurrent reservations that never exceed a limit.
//   - A seeded random differential test that compares every decision with
//     a reference model inside this package and checks each algorithm's
//     invariant over all admissions, on small limits and on large and
//     awkward ones, also with random headrooms and tenants.
//
// Where store.go leaves a choice open, the suite accepts every reading:
// a refused decision may name any limit that refuses the demand 1µs
// before its retry instant (or a pause in force then), and a GCRA refund
// is only tested where "no later grant since" and "the bucket still ends
// at this charge" agree.
package storetest
