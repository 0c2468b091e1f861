package grpcthrottle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle"
	"github.com/quotakit/throttle/grpcthrottle/internal/quotaserver"
	"github.com/quotakit/throttle/waiters"
)

// A health client allowed 2 checks an hour. A fleet shares the limit by
// giving every instance's limiter the same Redis:
// throttle.WithStore(redisstore.New(client)).
func ExampleUnaryClientInterceptor() {
	srv, err := quotaserver.Start(quotaserver.Quota{Rate: 100, Per: time.Second, Burst: 100}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name:   grpcthrottle.MethodRule(grpc_health_v1.Health_Check_FullMethodName), // "grpc.health.v1.Health.Check"
		Limits: []throttle.Limit{{Name: "checks", Rate: 2, Per: time.Hour}},
		Wait:   waiters.FailFast(),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim)),
		grpc.WithStreamInterceptor(grpcthrottle.StreamClientInterceptor(lim)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := grpc_health_v1.NewHealthClient(conn)

	for i := range 3 {
		_, err := hc.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
		var le *throttle.LimitError
		switch {
		case err == nil:
			fmt.Println("check", i, "sent")
		case errors.As(err, &le): // not sent; status.Code(err) as a server's refusal
			fmt.Println("check", i, "not sent:", status.Code(err), "by limit", le.Limit)
		default:
			fmt.Println("check", i, "failed:", err)
		}
	}
	fmt.Println("the server got", srv.Admitted())
	// Output:
	// check 0 sent
	// check 1 sent
	// check 2 not sent: ResourceExhausted by limit checks
	// the server got 2
}

// One watch stream at a time: a stream holds its slot of a Concurrency
// limit until it ends, here when Recv returns io.EOF.
func ExampleStreamClientInterceptor() {
	srv, err := quotaserver.Start(quotaserver.Quota{Rate: 100, Per: time.Second, Burst: 100}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name:   grpcthrottle.MethodRule(grpc_health_v1.Health_Watch_FullMethodName),
		Limits: []throttle.Limit{{Name: "watches", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}},
		Wait:   waiters.FailFast(),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(grpcthrottle.StreamClientInterceptor(lim)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := grpc_health_v1.NewHealthClient(conn)
	ctx := context.Background()

	first, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	fmt.Println("second stream while the first is open:", status.Code(err))
	for {
		resp, err := first.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("first stream:", resp.GetStatus())
	}
	third, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	fmt.Println("third stream, after the first ended:", status.Code(err))
	if err == nil {
		for _, err := third.Recv(); err == nil; _, err = third.Recv() {
		}
	}
	// Output:
	// second stream while the first is open: ResourceExhausted
	// first stream: SERVING
	// third stream, after the first ended: OK
}

// Each tenant its own quota, the tenant read from the call's metadata.
func ExampleWithMetadataKey() {
	srv, err := quotaserver.Start(quotaserver.Quota{Rate: 100, Per: time.Second, Burst: 100}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()

	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "health",
		Limits: []throttle.Limit{{Name: "per-tenant", Rate: 1, Per: time.Hour,
			Key: throttle.KeyFromContext("tenant")}},
		Wait: waiters.FailFast(),
	}}})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim,
			grpcthrottle.WithFallback("health"), // every method of the service
			grpcthrottle.WithMetadataKey("tenant", "tenant-id"))))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := grpc_health_v1.NewHealthClient(conn)

	for _, tenant := range []string{"acme", "globex", "acme"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant-id", tenant)
		_, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		fmt.Println(tenant+":", status.Code(err))
	}
	// Output:
	// acme: OK
	// globex: OK
	// acme: ResourceExhausted
}
