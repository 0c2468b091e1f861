package waiters_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle/waiters"
)

func Example() {
	ctx := context.Background()
	for _, w := range []waiters.Waiter{waiters.FailFast(), waiters.UpTo(30 * time.Second), waiters.Block()} {
		fmt.Println(w, w.MaxWait(ctx) == waiters.Forever, w.MaxWait(ctx) > 0)
	}
	// Output:
	// fail-fast false false
	// up-to(30s) false true
	// block true true
}
