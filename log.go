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
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
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
	ctx := eventContext(ev.Context)
	if ev.Err != nil {
		lim.logger.LogAttrs(ctx, slog.LevelWarn, "throttle: vendor asked to slow down; the shared pause could not be recorded, this instance pauses alone",
			append(attrs, slog.String("err", ev.Err.Error()))...)
		return
	}
	lim.logger.LogAttrs(ctx, slog.LevelInfo, "throttle: vendor asked to slow down; every instance pauses the rule", attrs...)
}

// logSettle logs, at Warn, a settlement that failed: the request stays
// charged its estimate.
func (lim *Limiter) logSettle(ev SettleEvent) {
	if lim.logger == nil || ev.Err == nil {
		return
	}
	lim.logger.LogAttrs(eventContext(ev.Context), slog.LevelWarn, "throttle: could not settle a request's charge to the cost its answer reported; its estimate stays charged",
		slog.String("rule", ev.Rule), slog.Int("charged", ev.Charged), slog.Int("cost", ev.Cost), slog.String("err", ev.Err.Error()))
}

// eventContext is an event's context for a log record, which carries it
// to the handler (a trace id, say): the request's, or Background.
func eventContext(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// WithLogger makes the limiter log to l: each change of the store's state
// (Error for [ErrStoreConfig], Warn when failing or down, Info when back),
// each pause learned (Info), settlements that failed (Warn), refused
// requests (Debug), and at construction notes on a policy that will not
// do what its author may expect (Warn: [Policy].Instances left unset on a
// shared store; Info: a GCRA limit that waiting requests share with
// limits that delay only some of them). Records never hold a key, header
// or URL. Without it, store state changes and notes, and only those, go
// to [slog.Default]; slog.New(slog.DiscardHandler) silences them.
func WithLogger(l *slog.Logger) Option {
	return func(lim *Limiter) { lim.logger = l }
}
