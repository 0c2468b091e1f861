// Command example runs a fleet of gRPC clients against a local server
// that enforces a published quota, each client held to that quota by
// grpcthrottle. It runs offline:
//
//	go run ./example                                   # one in-process store stands in for Redis
//	REDIS_URL=redis://localhost:6379 go run ./example  # the instances share a Redis
//
// The server is the standard health service behind a token bucket, 100
// calls a second with bursts of 20, on its own clock; beyond it, it
// answers RESOURCE_EXHAUSTED with a RetryInfo. Eight client instances
// (each its own limiter, store client and connection) call it from 16
// goroutines each, as fast as they may, for the duration. The clients'
// limit is the server's rate with a smaller burst: the difference (10
// calls, 100 ms at 100 a second) absorbs the time between the shared
// decision and the call's arrival at the server, which varies.
//
// At the end it prints what the server admitted, as a share of what its
// quota could have admitted over the same span, and how many calls it
// refused: none, unless the machine held some calls on their way to the
// server longer than the margin. Every call carries the instant the
// limiter let it go (quotaserver.Stamp, chained after the limiter's
// interceptor), and the run also counts the calls that were over the
// quota as sent: those the limiter let go beyond it, always none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle"
	"github.com/quotakit/throttle/grpcthrottle/internal/quotaserver"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

// serverQuota is what the server publishes and enforces.
var serverQuota = quotaserver.Quota{Rate: 100, Per: time.Second, Burst: 20}

// clientBurst is the clients' burst: the server's, less the calls that
// may arrive closer together than they were decided.
const clientBurst = 10

func main() {
	cfg := config{quota: serverQuota}
	flag.IntVar(&cfg.instances, "instances", 8, "client instances, each with its own limiter and connection")
	flag.IntVar(&cfg.callers, "callers", 16, "goroutines calling per instance")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to call")
	flag.Parse()
	cfg.redisURL = os.Getenv("REDIS_URL")
	if _, err := run(context.Background(), cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	instances, callers int
	duration           time.Duration
	redisURL           string // empty: one in-process store for every instance
	quota              quotaserver.Quota
}

// summary is what a run counted.
type summary struct {
	admitted, refused int64         // by the server
	span              time.Duration // first admission to last, on the server's clock
	capacity          int64         // the most the quota admits in span
	exhausted         int64         // RESOURCE_EXHAUSTED answers of the server that reached the clients
	sentOver          int           // calls over the quota at the instants they were sent (quotaserver.Quota.Over)
	transit           time.Duration // the longest a call took from the limiter to the server's quota
	local             int64         // calls the limiters refused: their quota was further away than the run's end
	other             int64         // calls that failed otherwise (cancelled at the end of the run)
}

// used is the share of the server's quota used over the run, in percent.
func (s summary) used() float64 {
	if s.capacity == 0 {
		return 0
	}
	return 100 * float64(s.admitted) / float64(s.capacity)
}

func run(ctx context.Context, cfg config, w io.Writer) (summary, error) {
	srv, err := quotaserver.Start(cfg.quota, nil)
	if err != nil {
		return summary{}, err
	}
	defer srv.Stop()
	policy := throttle.Policy{
		Instances: cfg.instances,
		Rules: []throttle.Rule{{
			Name:   grpcthrottle.MethodRule(grpc_health_v1.Health_Check_FullMethodName),
			Limits: []throttle.Limit{{Name: "calls", Rate: cfg.quota.Rate, Per: cfg.quota.Per, Burst: clientBurst}},
		}},
	}

	var shared quota.Store = memstore.New()
	var sum summary
	var wg sync.WaitGroup
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var exhausted, local, other atomic.Int64
	for range cfg.instances {
		store := shared
		if cfg.redisURL != "" {
			opts, err := redis.ParseURL(cfg.redisURL)
			if err != nil {
				return sum, err
			}
			c := redis.NewClient(opts)
			defer c.Close()
			if store, err = redisstore.New(c, redisstore.WithPrefix("grpcthrottle-example:")); err != nil {
				return sum, err
			}
		}
		lim, err := throttle.NewLimiter(policy, throttle.WithStore(store))
		if err != nil {
			return sum, err
		}
		conn, err := grpc.NewClient(srv.Addr(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim), quotaserver.Stamp),
			grpc.WithStreamInterceptor(grpcthrottle.StreamClientInterceptor(lim)))
		if err != nil {
			return sum, err
		}
		defer conn.Close()
		hc := grpc_health_v1.NewHealthClient(conn)
		for range cfg.callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for runCtx.Err() == nil {
					_, err := hc.Check(runCtx, &grpc_health_v1.HealthCheckRequest{})
					var le *throttle.LimitError
					switch {
					case err == nil:
					case errors.As(err, &le):
						// Near the end of the run the quota is further
						// away than the run's deadline: the call is
						// refused at once, so wait as it says.
						local.Add(1)
						sleep(runCtx, le.RetryAfter)
					case status.Code(err) == codes.ResourceExhausted:
						exhausted.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	sum.admitted, sum.refused, sum.span = srv.Admitted(), srv.Refused(), srv.Span()
	sum.capacity = cfg.quota.Capacity(sum.span)
	var sent []time.Time
	for _, c := range srv.Calls() {
		if !c.Sent.IsZero() {
			sent = append(sent, c.Sent)
			sum.transit = max(sum.transit, c.Arrived.Sub(c.Sent))
		}
	}
	sum.sentOver = cfg.quota.Over(sent)
	sum.exhausted, sum.local, sum.other = exhausted.Load(), local.Load(), other.Load()

	store := "one in-process store"
	if cfg.redisURL != "" {
		store = "Redis"
	}
	fmt.Fprintf(w, "server quota: %d calls per %v, bursts of %d\n", cfg.quota.Rate, cfg.quota.Per, cfg.quota.Burst)
	fmt.Fprintf(w, "clients: %d instances x %d callers for %v, sharing %s\n", cfg.instances, cfg.callers, cfg.duration, store)
	fmt.Fprintf(w, "server admitted %d calls in %v: %.1f%% of its quota over that span (%d)\n",
		sum.admitted, sum.span.Round(time.Millisecond), sum.used(), sum.capacity)
	fmt.Fprintf(w, "server answered RESOURCE_EXHAUSTED %d times (%d reached the clients); calls took up to %v to reach it\n",
		sum.refused, sum.exhausted, sum.transit.Round(time.Millisecond))
	fmt.Fprintf(w, "calls over the quota at the instants the limiters let them go: %d\n", sum.sentOver)
	fmt.Fprintf(w, "not sent, since the run ended first: %d refused by the limiters, %d cancelled\n", sum.local, sum.other)
	return sum, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
