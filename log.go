package throttle

import (
	"context"
	"log/slog"
)

// logDecision logs, at Debug, a request that was not sent as asked.
// Records carry names and durations only, never keys.
func (t *Transport) logDecision(ctx context.Context, ev DecisionEvent) {
	if t.logger == nil || ev.Outcome == Allowed || ev.Outcome == Waited {
		return
	}
	if !t.logger.Enabled(ctx, slog.LevelDebug) {
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
	t.logger.LogAttrs(ctx, slog.LevelDebug, "throttle: request not sent as asked", attrs...)
}

// logPause logs a pause learned from a vendor's answer.
func (t *Transport) logPause(ev PauseEvent) {
	if t.logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("rule", ev.Rule), slog.Int("status", ev.Status),
		slog.Duration("pause", ev.Pause), slog.Bool("capped", ev.Capped)}
	if ev.Err != nil {
		t.logger.LogAttrs(context.Background(), slog.LevelWarn, "throttle: vendor asked to slow down; the shared pause could not be recorded, this instance pauses alone",
			append(attrs, slog.String("error", ev.Err.Error()))...)
		return
	}
	t.logger.LogAttrs(context.Background(), slog.LevelInfo, "throttle: vendor asked to slow down; every instance pauses the rule", attrs...)
}
