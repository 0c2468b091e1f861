package throttle

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/quotaheader"
)

// opened keeps, per vendor window (its reset as written), the earliest
// answer received, whatever the order the answers are read in, and
// bounds what it keeps.
func TestOpened(t *testing.T) {
	per := time.Second
	id := windowID{"s", "search", "k"}
	t0 := time.UnixMicro(1_700_000_000_000_000)
	r1, r2 := t0.Add(time.Second), t0.Add(2*time.Second)
	var lr learner
	opened := func(reset, recv time.Time) time.Time {
		t.Helper()
		first, cuts := lr.opened(id, per, quotaheader.Feedback{ResetInstant: reset, ResetResolution: time.Second}, recv)
		require.True(t, cuts)
		return first
	}
	assert.Equal(t, t0.Add(10*time.Millisecond), opened(r1, t0.Add(10*time.Millisecond)), "the first answer")
	assert.Equal(t, t0.Add(10*time.Millisecond), opened(r1, t0.Add(40*time.Millisecond)), "a later answer of the same window")
	assert.Equal(t, t0.Add(5*time.Millisecond), opened(r1, t0.Add(5*time.Millisecond)), "an earlier answer read late")
	assert.Equal(t, t0.Add(30*time.Millisecond), opened(t0.Add(time.Second+time.Millisecond), t0.Add(30*time.Millisecond)),
		"another reset is another window, however near")
	assert.Equal(t, t0.Add(time.Second), opened(r2, t0.Add(time.Second)))
	assert.Equal(t, t0.Add(5*time.Millisecond), opened(r1, t0.Add(time.Second)), "the window before is still known")
	assert.False(t, lr.uncut(id, per))

	// A reset that moves with every answer (a vendor that writes now
	// plus the time left) gives each answer its own window: bounded.
	at := t0
	for range 10 * maxOpened {
		at = at.Add(time.Millisecond)
		assert.Equal(t, at, opened(at.Add(per), at))
	}
	lr.mu.Lock()
	n := len(lr.windows[id].opened)
	lr.mu.Unlock()
	assert.LessOrEqual(t, n, maxOpened)

	// A delay, or a reset coarser than the window, shortens nothing, and
	// the horizon is the span again until a reset that can comes.
	_, cuts := lr.opened(id, per, quotaheader.Feedback{Reset: at.Add(per)}, at)
	assert.False(t, cuts, "a delay")
	assert.True(t, lr.uncut(id, per))
	_, cuts = lr.opened(id, per, quotaheader.Feedback{ResetInstant: at.Add(per), ResetResolution: 2 * per}, at)
	assert.False(t, cuts, "coarser than the window")
	opened(at.Add(per), at)
	assert.False(t, lr.uncut(id, per))
}

// A learned pause holds decisions a send lag less only where every rule
// its key holds back sends each request at least that lag after a
// charge: an anchored limit of the rule with no Match.
func TestPauseLead(t *testing.T) {
	anchored := func(name, scope string, per time.Duration) Rule {
		return Rule{Name: name, Scope: scope, Host: "api.example.com", Path: "/" + name,
			Limits: []Limit{{Name: name, Rate: 10, Per: per, Algorithm: FixedWindow}},
			Learn:  Learning{Anchor: name}}
	}
	plain := func(name, scope string) Rule {
		return Rule{Name: name, Scope: scope, Host: "api.example.com", Path: "/" + name,
			Limits: []Limit{{Name: name, Rate: 10, Per: time.Second, Algorithm: FixedWindow}}}
	}
	byKey := func(r Rule) Rule {
		r.Limits[0].Key = func(*http.Request) (string, error) { return "k", nil }
		r.Learn.PauseBy = r.Limits[0].Name
		return r
	}
	leads := func(rules ...Rule) map[string][2]time.Duration {
		cp, err := Policy{Rules: rules}.compile()
		require.NoError(t, err)
		out := map[string][2]time.Duration{}
		for _, r := range cp.rules {
			out[r.id] = [2]time.Duration{r.pauseLead(""), r.pauseLead("x")}
		}
		return out
	}
	assert.Equal(t, [2]time.Duration{200 * time.Millisecond, 0}, leads(anchored("a", "s", time.Minute))["a"], "alone in its scope: the lag of a minute's window")
	assert.Equal(t, [2]time.Duration{100 * time.Millisecond, 0}, leads(anchored("a", "s", 500*time.Millisecond))["a"], "a fifth of a short window")
	got := leads(anchored("a", "s", time.Minute), plain("p", "s"))
	assert.Zero(t, got["a"][0], "the scope's pause holds a rule that sends at once")
	got = leads(anchored("a", "s", time.Minute), plain("p", "t"))
	assert.Equal(t, 200*time.Millisecond, got["a"][0], "a rule of another scope is not held")
	got = leads(anchored("a", "s", time.Minute), anchored("b", "s", 500*time.Millisecond))
	assert.Equal(t, 100*time.Millisecond, got["a"][0], "the shortest lag of the scope")

	// By key: the rules whose PauseBy limit has the same name.
	got = leads(byKey(anchored("a", "s", time.Minute)), plain("p", "s"))
	assert.Equal(t, [2]time.Duration{0, 200 * time.Millisecond}, got["a"], "a plain rule of the scope is not held by the limit's key")
	shared := plain("p", "s")
	shared.Limits[0].Name, shared.Limits[0].Per = "a", time.Minute
	shared = byKey(shared)
	got = leads(byKey(anchored("a", "s", time.Minute)), shared)
	assert.Equal(t, 200*time.Millisecond, got["a"][1], "a rule sharing the anchored limit is anchored too")
	assert.Equal(t, 200*time.Millisecond, got["p"][1])

	// An anchored limit with a Match does not lag every request.
	m := anchored("a", "s", time.Minute)
	m.Limits = append(m.Limits, Limit{Name: "other", Rate: 10, Per: time.Second, Algorithm: FixedWindow})
	m.Limits[0].Match = func(*http.Request) bool { return true }
	assert.Zero(t, leads(m)["a"][0])
}
