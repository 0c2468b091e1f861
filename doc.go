// Package throttle keeps a fleet of services within the rate limits of the
// third-party APIs they call. Its [Transport] is an [http.RoundTripper]:
// put it in an [http.Client] (or in a vendor SDK's client) and every
// outbound request is held to the limits of a [Policy] before it is sent.
//
// # Packages
//
//	throttle        Transport, Policy, Rule, Limit, keys, waiters' interface, errors, hooks, options
//	quota           the store contract: Store, Demand, Decision, Reservation (as database/sql/driver)
//	memstore        the in-process store, the default
//	redisstore      the Redis store: single node, Sentinel, Cluster
//	waiters         FailFast, UpTo, Block (standard library only)
//	quotaheader     reads Retry-After, X-RateLimit-*, IETF RateLimit (standard library only)
//	policyfile      policies from YAML or JSON files
//	otelthrottle    OpenTelemetry metrics, and the decision as an event on the request's span
//	retryable       go-retryablehttp stacked on the Transport
//	presets/slackquota, presets/githubquota   the vendors' published limits, with fakes
//	storetest       the store conformance suite
//	cmd/throttle    check a policy file; show and reset live counters
//
// The graph is a tree: the leaves (quota, waiters, quotaheader) import
// nothing of ours; memstore and redisstore import only quota; the root
// imports quota, memstore and the leaves, and never redisstore or
// go-redis; the rest import the root.
//
// # Quickstart
//
// At most 100 Slack notifications per 30 minutes in all, and at most 10 per
// 30 minutes per event category:
//
//	global := throttle.Limit{Name: "global", Rate: 100, Per: 30 * time.Minute}
//	perCategory := throttle.Limit{Name: "category", Rate: 10, Per: 30 * time.Minute,
//		Key: throttle.KeyFromContext("category")}
//	t, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{
//		Name: "slack-notify", Host: "hooks.slack.com",
//		Limits: []throttle.Limit{global, perCategory},
//		Wait:   waiters.FailFast(),
//	}}})
//	client := &http.Client{Transport: t}
//	ctx = throttle.WithKey(ctx, "category", "errors")
//	resp, err := client.Do(req.WithContext(ctx))
//	var le *throttle.LimitError
//	if errors.As(err, &le) { /* not sent: le.Limit, le.RetryAfter */ }
//
// # The model
//
// A [Policy] is an ordered list of [Rule]s. A rule matches requests by
// host, method, path pattern (the [net/http.ServeMux] syntax) and an
// optional predicate; the first rule that matches decides. A request that
// matches no rule is sent unlimited (or refused, with
// Policy.RefuseUnmatched).
//
// A rule names one or more [Limit]s, each "at most Rate per Per", counted
// per key ([KeyFunc]: a constant, a context value, a header, a path
// wildcard, a query or body field). All limits of a rule are decided in
// one atomic step: either every limit admits the request and every one is
// charged, or none is charged. So a notification refused by its category's
// limit does not use up the global quota. A limit name used by several
// rules is one shared counter.
//
// The decision is made by a [quota.Store]. The default [memstore.Store] keeps
// counters in the process; the redisstore package keeps them in Redis, so
// every instance of a service shares one quota, with every decision made
// by one Lua script on Redis's clock.
//
// # Waiting
//
// The rule's [Waiter] (see the waiters package) gives how long a request
// may wait: not at all (FailFast), up to a bound (UpTo), or until its
// context ends (Block, the default). The budget, capped by the context's
// deadline, goes to the store with the decision. If the request can go
// within it, the store reserves the slot for it at once, and the request
// sleeps on a timer until then: no polling, and no herd of instances
// retrying at the same instant. If it cannot, the request fails at once
// with a [*LimitError] carrying the earliest time a retry could succeed,
// and nothing is charged. If the context ends while a request sleeps, its
// reservation is given back.
//
// # In-flight limits
//
// A [Concurrency] limit bounds how many requests are in flight at once
// (Rate slots) instead of how many start per period, and sits in the same
// rule as rate limits: a request gets its rate quota and its slot, or
// neither. Each slot is a lease with an expiry Per away; the transport
// renews it while the request is in flight and releases it when the
// response body is closed or read to the end, or the round trip fails. A
// crashed instance's slots come back when their leases expire. A request
// that finds no free slot waits, within its waiter's budget, until a
// release wakes it. A request that must wait for its rate quota takes its
// slot only when it goes ([quota.LeaseStore.Claim]), so a waiting request holds
// no slot. The store must be a [quota.LeaseStore].
//
// # Pauses
//
// A store can pause a rule's scope until an instant ([Store.Pause]);
// decisions in the scope wait or fail until then. Pauses are how the
// answers of a vendor ("429 Too Many Requests, Retry-After: 30") are shared
// with every instance.
//
// # Learning from responses
//
// After each response the transport reads the vendor's rate-limit headers
// ([quotaheader.Parse]: Retry-After, the X-RateLimit-* families, the IETF
// RateLimit fields, OpenAI's and Anthropic's) and, as the rule's
// [Learning] says, pauses the rule's scope in the store after a "slow
// down" answer or a spent quota, so every instance holds back before its
// own 429; it can also lower a limit's shared counter to the quota the
// vendor reports ([Learning.Sync]). [Profile]s say how particular vendors
// (GitHub, X, Discord) write their headers. A rule's [Retry] resends "slow
// down" answers through the limiter; the retryable package does the same
// for a hashicorp/go-retryablehttp client stacked on the transport.
//
// # Errors
//
// A request that is not sent returns an error from RoundTrip, which
// [http.Client] wraps in a [*url.Error]; [errors.Is] and [errors.As] see
// through it. [ErrLimited] matches every refusal by a limit or a pause,
// and [*LimitError] carries the rule, the limit and RetryAfter. A store
// failure (Redis unreachable, say) is handled by the rule's failure mode
// (next section); with [FailClosed] the request fails with an error
// matching [ErrStoreUnavailable] that wraps the store's own, and is not
// sent.
//
// # When the store fails
//
// A shared store can be unreachable, slow, busy or restarted. Each rule
// says what its requests do then ([Rule.OnStoreFailure], defaulting to
// [Policy.OnStoreFailure]):
//
//   - [FailLocal] (the default) decides with an in-process store that
//     gives this instance its share of every limit, the quota divided by
//     [Policy.Instances] ([LocalShare]), so the fleet stays near the quota
//     in total;
//   - [FailOpen] sends without a decision, reported (DecisionEvent.Fallback)
//     and reported (DecisionEvent.Fallback);
//   - [FailClosed] refuses with [ErrStoreUnavailable].
//
// A slow store is not a dead one. A request whose store call is slow waits
// for its answer as long as the store keeps answering calls: a loaded
// machine, a delayed reply or a Redis paused for a second never gets a
// request decided twice (once by the store, once locally), so decisions
// stay exact. A call fails when the store returns an error, or when it has
// answered nothing for the call budget ([Breaker].CallTimeout: adaptive,
// 2 s at least); a failed call is abandoned (it finishes on its own
// goroutine, and a grant it makes late is given back) and its request gets
// its failure mode. After a few failures in a row the store counts as down
// and the circuit breaker ([Breaker]) stops calling it for OpenFor (500
// ms), so requests get their failure mode at no added latency; then one
// request at a time probes the store, and the first answer closes the
// breaker. While instances decide locally, the fleet admits at most
// Rate + Instances*max(1, Rate/Instances) per window ([FailLocal]). The
// transport never holds a store connection while a request waits for its
// slot (a decision is one short call; the wait is a timer), and at most
// MaxInFlight store calls run at once, so an outage cannot pile up
// connections. Changes of the store's state are reported once each, not
// per request ([Hooks].OnStoreState), and logged, to [log/slog.Default] unless
// [WithLogger] says otherwise; a misconfigured store ([ErrStoreConfig]) is
// logged at Error.
//
// A store that loses its state (a Redis restart, FLUSHALL, a failover that
// loses acknowledged writes) forgets what it charged: the fleet may then
// admit at most one more burst per limit and key, per loss. Pauses
// survive it on every instance that learned them: each keeps a local copy
// and honours it whatever the store says.
package throttle
