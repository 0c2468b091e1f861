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

// WithLogger makes the limiter log to l: each change of the store's state
// (Error for [ErrStoreConfig], Warn when failing or down, Info when back),
// each pause learned (Info), and refused requests (Debug). Records never
// hold a key, header or URL. Without it, store state changes, and only
// those, go to [slog.Default]; slog.New(slog.DiscardHandler) silences them.
func WithLogger(l *slog.Logger) Option {
	return func(lim *Limiter) { lim.logger = l }
}
