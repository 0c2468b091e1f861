package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
)

func TestKeyFuncs(t *testing.T) {
	const token = "xoxb-1234-secret-token"
	newReq := func(method, target, ctype, body string) *http.Request {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("X-Team", "T1")
		r.SetPathValue("owner", "octo")
		return r.WithContext(throttle.WithKey(throttle.WithKey(context.Background(), "category", "warn"), "category", "errors"))
	}
	tests := []struct {
		name    string
		key     throttle.KeyFunc
		req     *http.Request
		want    string
		wantErr error
	}{
		{name: "constant", key: throttle.ConstantKey("k"), req: newReq("GET", "/", "", ""), want: "k"},
		{name: "context, latest wins", key: throttle.KeyFromContext("category"), req: newReq("GET", "/", "", ""), want: "errors"},
		{name: "context missing", key: throttle.KeyFromContext("tenant"), req: newReq("GET", "/", "", ""), wantErr: throttle.ErrMissingKey},
		{name: "plain header", key: throttle.KeyFromHeader("x-team"), req: newReq("GET", "/", "", ""), want: "T1"},
		{name: "header missing", key: throttle.KeyFromHeader("X-Nope"), req: newReq("GET", "/", "", ""), wantErr: throttle.ErrMissingKey},
		{name: "path wildcard", key: throttle.KeyFromPath("owner"), req: newReq("GET", "/", "", ""), want: "octo"},
		{name: "path wildcard missing", key: throttle.KeyFromPath("repo"), req: newReq("GET", "/", "", ""), wantErr: throttle.ErrMissingKey},
		{name: "query", key: throttle.KeyFromQuery("channel"), req: newReq("GET", "/?channel=C1", "", ""), want: "C1"},
		{name: "query missing", key: throttle.KeyFromQuery("channel"), req: newReq("GET", "/", "", ""), wantErr: throttle.ErrMissingKey},
		{name: "form body", key: throttle.KeyFromBody("channel"), req: newReq("POST", "/", "application/x-www-form-urlencoded", "text=hi&channel=C2"), want: "C2"},
		{name: "form falls back to query", key: throttle.KeyFromBody("channel"), req: newReq("POST", "/?channel=C3", "application/x-www-form-urlencoded", "text=hi"), want: "C3"},
		{name: "json body", key: throttle.KeyFromBody("channel"), req: newReq("POST", "/", "application/json; charset=utf-8", `{"text":"hi","channel":"C4"}`), want: "C4"},
		{name: "json number", key: throttle.KeyFromBody("n"), req: newReq("POST", "/", "application/json", `{"n": 42}`), want: "42"},
		{name: "json missing", key: throttle.KeyFromBody("channel"), req: newReq("POST", "/", "application/json", `{}`), wantErr: throttle.ErrMissingKey},
		{name: "join", key: throttle.JoinKeys(throttle.KeyFromHeader("X-Team"), throttle.KeyFromQuery("c")), req: newReq("GET", "/?c=a/b", "", ""), want: "T1/a%2Fb"},
		{name: "join fails with a part", key: throttle.JoinKeys(throttle.KeyFromHeader("X-Team"), throttle.KeyFromQuery("c")), req: newReq("GET", "/", "", ""), wantErr: throttle.ErrMissingKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.key(tt.req)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSecretKeysAreHashed(t *testing.T) {
	const token = "xoxb-1234-secret-token"
	r := httptest.NewRequest("GET", "/?token="+token, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("X-Api-Key", token)
	for name, f := range map[string]throttle.KeyFunc{
		"authorization":  throttle.KeyFromHeader("Authorization"),
		"api key header": throttle.KeyFromHeader("x-api-key"),
		"hashed query":   throttle.HashKey(throttle.KeyFromQuery("token")),
	} {
		k, err := f(r)
		require.NoError(t, err, name)
		assert.NotContains(t, k, "secret", name)
		assert.True(t, strings.HasPrefix(k, "sha256:"), name)
	}
	a, _ := throttle.KeyFromHeader("Authorization")(r)
	r.Header.Set("Authorization", "Bearer other")
	b, _ := throttle.KeyFromHeader("Authorization")(r)
	assert.NotEqual(t, a, b, "different tokens, different counters")
}

func TestKeyFromBodyRestoresBody(t *testing.T) {
	const body = `{"channel":"C9","text":"` + "hello" + `"}`
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	k, err := throttle.KeyFromBody("channel")(r)
	require.NoError(t, err)
	assert.Equal(t, "C9", k)
	sent, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.Equal(t, body, string(sent), "the body is put back whole")
	require.NoError(t, r.Body.Close())
}
