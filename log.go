package throttle

import (
	"context"
	"log/slog"
)

// logDecision logs, at Debug, a request that was not sent as asked.
// Records carry names and durations only, never keys.
func (lim *Limiter) logDecision(ctx context.Context, ev DecisionEvent) {
	if lim.logger == nil || ev.Outcome == Allowed || ev.Outcome == Waited {
		return
	}
	if !lim.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("rule", ev.Rule), slog.String("outcome", ev.Outcome.String()),
		slog.Duration("retry_after", ev.Wait)}
	if ev.Limit != "" {
		attrs = append(attrs, slog.String("limit", ev.Limit))
	}
	if ev.Shadow {
		attrs = append(attrs, slog.Bool("shadow", true))
	}
	if ev.Err != nil && ev.Outcome == Failed {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	lim.logger.LogAttrs(ctx, slog.LevelDebug, "throttle: request not sent as asked", attrs...)
}

// logPause logs a pause learned from a vendor's answer.
func (lim *Limiter) logPause(ev PauseEvent) {
	if lim.logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("rule", ev.Rule), slog.Int("status", ev.Status),
		slog.Duration("pause", ev.Pause), slog.Bool("capped", ev.Capped)}
	if ev.Err != nil {
		lim.logger.LogAttrs(context.Background(), slog.LevelWarn, "throttle: vendor asked to slow down; the shared pause could not be recorded, this instance pauses alone",
			append(attrs, slog.String("error", ev.Err.Error()))...)
		return
	}
	lim.logger.LogAttrs(context.Background(), slog.LevelInfo, "throttle: vendor asked to slow down; every instance pauses the rule", attrs...)
}

// WithLogger makes the transport log to l:
//
//   - every change of the store's state (see [StoreEvent]), once per
//     change, never per request: Error when the store's error wraps
//     [ErrStoreConfig] (a configuration mistake, which waiting does not
//     mend), Warn when the store starts failing or the breaker opens, Info
//     when it answers again, with the count of failed calls, the outage's
//     length and the store's error;
//   - every pause learned from a vendor's answer, at Info (Warn when the
//     store could not record it), with the rule, status and pause;
//   - requests refused, given up or failed, at Debug only, with the rule,
//     limit, outcome and retry time.
//
// Records never hold a key, a header or a URL, since those may carry
// secrets. The hooks ([Hooks]) receive the same events.
//
// Without WithLogger (or with a nil l), the changes of the store's state,
// and only those, go to [slog.Default], so that a store that fails or is
// misconfigured is never silent. To silence them, pass a logger whose
// handler discards, such as slog.New(slog.DiscardHandler).
func WithLogger(l *slog.Logger) Option {
	return func(lim *Limiter) { lim.logger = l }
}
