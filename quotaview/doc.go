// Package quotaview serves a live page of a [throttle.Limiter]'s quota,
// for people: every rule and limit as configured; what the whole fleet
// has used and has left of each limit, per key, read from the shared
// store ([quota.Inspector]); the pauses learned from vendors, with their
// cause and end; the store's health; this instance's traffic over the
// last minutes as small plots; and, per rule, the limit that bound its
// latest refusals and waits. It is the /debug/pprof of throttling:
//
//	rec := quotaview.NewRecorder()
//	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store),
//		throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
//	...
//	http.Handle("/debug/throttle/", quotaview.New(t.Limiter(), quotaview.WithRecorder(rec)))
//
// The page refreshes itself while it is open (it polls its own URL), and
// the same data is served as JSON at "json" below it, for scripts. It
// uses no external asset: styles, script and plots (inline SVG) are in
// the page, so it works in an air-gapped cluster.
//
// # Safe by default
//
// The page is read-only unless [WithActions] is given; then it can reset
// a counter and clear a pause, each a POST carrying the page's CSRF
// token. Keys are shown as the store holds them: escaped, and hashed when
// the policy hashes them ([throttle.HashKey]), so a secret used as a key
// is never rendered. The handler keeps no key between requests: the keys
// it shows are those the store holds now, at most [WithMaxKeys] of them,
// those with the least quota left first. Mount it where only operators
// reach it, as /debug/pprof.
//
// # Cost
//
// Each view reads every scope of the policy from the store
// ([quota.Inspector.Inspect], which redisstore implements with a SCAN of
// the scope); views are served one at a time, so many open pages cost the
// store no more than one.
package quotaview
