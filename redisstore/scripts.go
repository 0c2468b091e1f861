package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each operation is one script, run with [redis.Script.Run]: EVALSHA, and
// EVAL when Redis answers NOSCRIPT (after SCRIPT FLUSH or a restart).
// Scripts are never pipelined: NOSCRIPT recovery does not work there.
var (
	//go:embed take.lua
	takeSource string
	takeScript = redis.NewScript(takeSource)

	// take_gcra.lua is take.lua for demands whose limits are all GCRA
	// (see Store.Take): the same decision in fewer Redis commands.
	//go:embed take_gcra.lua
	takeGCRASource string
	takeGCRAScript = redis.NewScript(takeGCRASource)

	// take_batch.lua is take_gcra.lua for several demands of one scope
	// at once (WithBatching, batch.go).
	//go:embed take_batch.lua
	takeBatchSource string
	takeBatchScript = redis.NewScript(takeBatchSource)

	// take_window.lua is take.lua for a demand of one fixed-window or
	// sliding-window limit (see Store.Take).
	//go:embed take_window.lua
	takeWindowSource string
	takeWindowScript = redis.NewScript(takeWindowSource)

	//go:embed cancel.lua
	cancelSource string
	cancelScript = redis.NewScript(cancelSource)

	//go:embed pause.lua
	pauseSource string
	pauseScript = redis.NewScript(pauseSource)

	// claim.lua takes the Concurrency slots of a reservation that came
	// due (Store.Claim, lease.go).
	//go:embed claim.lua
	claimSource string
	claimScript = redis.NewScript(claimSource)
)
