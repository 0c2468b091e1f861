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
//	grpcthrottle    gRPC client interceptors on a Limiter (a module of its own)
//	presets/slackquota, presets/githubquota   the vendors' published limits, with fakes
//	storetest       the store conformance suite
//	cmd/throttle    check a policy file; show and reset live counters
//
// The graph is a tree: quota, waiters and quotaheader import nothing of
// ours; memstore and redisstore only quota; the root never imports
// redisstore or go-redis.
//
// # The model
//
// A [Policy] is an ordered list of [Rule]s; a request takes the first
// rule that matches its host, method and path. A rule names [Limit]s, each
// "at most Rate per Per" counted per key ([KeyFunc]), and decides those
// that apply to the request, each its own cost, in one atomic step in the
// store: every limit admits and is charged, or none is. The rule's [Waiter] (package waiters) says how long a request
// may wait; the store reserves its instant and the request sleeps on a
// timer, or it fails at once with a [*LimitError] carrying RetryAfter. The
// vendor's answers (429s, Retry-After, quota headers, per [Learning])
// become pauses shared by every instance through the store. A request
// whose cost the vendor reports only in its answer is charged an estimate
// and settled to that cost once the body is read ([Rule].Settle). When the
// store fails, the rule's [FailureMode] decides, behind a [Breaker] that
// tells a slow store from a dead one. A request's [Class] may leave part
// of every limit to the classes above it, and a limit's Tenant shares it
// fairly among tenants.
//
// A [Limiter] makes the same decisions for calls that are not HTTP
// (Allow, Wait, Reserve, and Report and Settle for the answer); the
// [Transport] is the Limiter of an [http.Client]. The repository's docs/
// folder holds the long form.
package throttle
