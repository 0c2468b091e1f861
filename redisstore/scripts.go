package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each operation is one script, run with [redis.Script.Run] (or
// Store.run, resend.go): EVALSHA, and EVAL when Redis answers NOSCRIPT
// (after SCRIPT FLUSH or a restart). Scripts are never pipelined: NOSCRIPT
// recovery does not work there. Every script of the package is embedded
// here.
var (
	//go:embed take.lua
	takeSource string
	takeScript = newScript(takeSource)

	// take_gcra.lua is take.lua for demands whose limits are all GCRA
	// (see Store.Take): the same decision in fewer Redis commands.
	//go:embed take_gcra.lua
	takeGCRASource string
	takeGCRAScript = newScript(takeGCRASource)

	// take_batch.lua is take_gcra.lua for several demands of one scope
	// at once (WithBatching, batch.go).
	//go:embed take_batch.lua
	takeBatchSource string
	takeBatchScript = newScript(takeBatchSource)

	// take_window.lua is take.lua for a demand of one fixed-window or
	// sliding-window limit (see Store.Take).
	//go:embed take_window.lua
	takeWindowSource string
	takeWindowScript = newScript(takeWindowSource)

	//go:embed cancel.lua
	cancelSource string
	cancelScript = newScript(cancelSource)

	//go:embed pause.lua
	pauseSource string
	pauseScript = newScript(pauseSource)

	// claim.lua takes the Concurrency slots of a reservation that came
	// due (Store.Claim, lease.go).
	//go:embed claim.lua
	claimSource string
	claimScript = newScript(claimSource)

	// release.lua frees released leases (Store.Release, releases.go).
	//go:embed release.lua
	releaseSource string
	releaseScript = newScript(releaseSource)

	// renew.lua extends leases (Store.Renew, lease.go).
	//go:embed renew.lua
	renewSource string
	renewScript = newScript(renewSource)

	// sync.lua lowers a counter to what the vendor reports (Store.Sync).
	//go:embed sync.lua
	syncSource string
	syncScript = newScript(syncSource)
)

// A luaScript is a script with its source, so that Store.run can send it
// as EVAL when Redis answers NOSCRIPT.
type luaScript struct {
	*redis.Script
	src string
}

func newScript(src string) luaScript { return luaScript{redis.NewScript(src), src} }
