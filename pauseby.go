package throttle

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/quotakit/throttle/quota"
)

// Pause keys.
//
// By default a pause learned from a response holds back the rule's whole
// scope (the store's pause key ""). With [Learning.PauseBy] naming a limit
// of the rule, it holds back only the requests charged to the same key of
// that limit: the pause key is "NAME:KEY", the limit's name and the
// request's (escaped) key for it, so Slack's 429 on one method in one
// workspace pauses that method in that workspace, not the whole client.
// Decisions in the scope still honour a scope-wide pause (key ""), such as
// one recorded by hand with [Store.Pause].

// pauseByIndex returns the index in r.Limits of the limit named by
// r.Learn.PauseBy, or -1 when it is empty; an error if it names none.
func pauseByIndex(r Rule) (int, error) {
	if r.Learn.PauseBy == "" {
		return -1, nil
	}
	for i, l := range r.Limits {
		if l.Name == r.Learn.PauseBy {
			if l.Match != nil {
				return -1, fmt.Errorf("names limit %q, which has a Match: the pause key must exist for every request of the rule", l.Name)
			}
			return i, nil
		}
	}
	return -1, fmt.Errorf("names no limit of the rule: %q", r.Learn.PauseBy)
}

// pauseKey returns the store pause key that a response to demand d pauses:
// "" (the whole scope) unless the rule pauses by a limit's key.
func (r *rule) pauseKey(d *demand) string {
	if r.pauseIdx < 0 || d == nil {
		return ""
	}
	i := d.limitOf(r.pauseIdx)
	if i < 0 {
		return ""
	}
	b := d.Limits[i]
	return b.Limit.Name + ":" + b.Key
}

// pauseKeyOf returns the pause key of req, computing the PauseBy limit's
// key; "" if the rule pauses its whole scope or req has no such key.
func (r *rule) pauseKeyOf(req *http.Request) string {
	if r.pauseIdx < 0 {
		return ""
	}
	l := r.Limits[r.pauseIdx]
	key := ""
	if l.Key != nil {
		k, err := l.Key(req)
		if err != nil {
			return ""
		}
		key = escapeKey(k)
	}
	return l.Name + ":" + key
}

// pauseID names a pause in the transport's local memory of pauses: the
// scope, and the pause key unless it is the whole scope's.
func (r *rule) pauseID(key string) string {
	if key == "" {
		return r.scope
	}
	return r.scope + "\x00" + key
}

// pauseName returns what a [LimitError] reports of a pause key: the limit
// name of a "NAME:KEY" pause key, never the key, which may be derived from
// request data; other pause keys unchanged.
func pauseName(key string) string {
	if i := strings.IndexByte(key, ':'); i > 0 && quota.ValidName(key[:i]) {
		return key[:i]
	}
	return key
}
