package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScrape(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), "", &out))
	got := out.String()
	count := func(outcome string) string {
		m := regexp.MustCompile(`throttle_decisions_total\{[^}]*throttle_outcome="` + outcome + `"[^}]*\} (\d+)`).FindStringSubmatch(got)
		if m == nil {
			return ""
		}
		return m[1]
	}
	allowed, err := strconv.Atoi(count("allowed"))
	require.NoError(t, err, got)
	assert.GreaterOrEqual(t, allowed, 5, "at least the burst")
	assert.NotEmpty(t, count("waited"))
	assert.NotEmpty(t, count("refused"))
	assert.Regexp(t, `throttle_vendor_limited_total\{[^}]*http_response_status_code="429"[^}]*\} 1`, got)
	assert.Regexp(t, `throttle_pauses_active\{[^}]*\} 1`, got)
	assert.Regexp(t, `throttle_requests_pending\{[^}]*throttle_rule="api"[^}]*\} 0`, got, "no request is being decided once the loop is over")
	assert.Regexp(t, `throttle_store_duration_seconds_bucket\{[^}]*le="0.001"\} \d+`, got)
}
