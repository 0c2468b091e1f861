// Package quotaserver is a gRPC server that enforces a published quota
// exactly, for the tests and the example of grpcthrottle: the standard
// health service (grpc.health.v1.Health) behind a token bucket on the
// server's own clock, which answers RESOURCE_EXHAUSTED with an
// errdetails.RetryInfo beyond it, as Google's APIs do.
package quotaserver

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Quota is a token bucket: Rate calls per Per on average, Burst at once
// after an idle time (a full bucket). Every call costs one token.
type Quota struct {
	Rate  int
	Per   time.Duration
	Burst int
}

// HoldService is the service name for which Watch sends SERVING and then
// holds the stream open until the client ends it; for any other name Watch
// sends SERVING and ends the stream.
const HoldService = "hold"

// A Server is a loopback gRPC health server behind a [Quota]. Its
// methods are safe for concurrent use.
type Server struct {
	grpc_health_v1.UnimplementedHealthServer

	q   Quota
	now func() time.Time

	mu    sync.Mutex
	tat   time.Time // the bucket's theoretical arrival time (GCRA)
	first time.Time // first admission
	last  time.Time // last admission

	admitted, refused atomic.Int64
	open              atomic.Int64 // streams in the handler now

	srv  *grpc.Server
	lis  net.Listener
	done chan struct{}
}

// Start serves on a free loopback port; now is the server's clock (nil:
// time.Now). Stop it with Stop.
func Start(q Quota, now func() time.Time) (*Server, error) {
	if now == nil {
		now = time.Now
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{q: q, now: now, lis: lis, done: make(chan struct{})}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(s.unary), grpc.StreamInterceptor(s.stream))
	grpc_health_v1.RegisterHealthServer(s.srv, s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop stops the server at once and waits until it has.
func (s *Server) Stop() {
	s.srv.Stop()
	<-s.done
}

// Admitted is how many calls the quota admitted.
func (s *Server) Admitted() int64 { return s.admitted.Load() }

// Refused is how many calls were answered RESOURCE_EXHAUSTED.
func (s *Server) Refused() int64 { return s.refused.Load() }

// Span is the time from the first admission to the last, on the server's
// clock.
func (s *Server) Span() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Sub(s.first)
}

// Capacity is the most the quota admits in a span of d: a full bucket,
// then Rate per Per.
func (q Quota) Capacity(d time.Duration) int64 {
	return int64(q.Burst) + int64(d)*int64(q.Rate)/int64(q.Per)
}

// take takes a token: nil, or the RESOURCE_EXHAUSTED status to answer.
func (s *Server) take() error {
	interval := s.q.Per / time.Duration(s.q.Rate)
	s.mu.Lock()
	now := s.now()
	tat := s.tat
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(interval)
	if wait := tat.Sub(now) - time.Duration(s.q.Burst)*interval; wait > 0 {
		s.mu.Unlock()
		s.refused.Add(1)
		st, _ := status.New(codes.ResourceExhausted, "quota exceeded").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		return st.Err()
	}
	s.tat = tat
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.mu.Unlock()
	s.admitted.Add(1)
	return nil
}

func (s *Server) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.take(); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.take(); err != nil {
		return err
	}
	s.open.Add(1)
	defer s.open.Add(-1)
	return h(srv, ss)
}

// Open is how many streams the server's handlers are serving now.
func (s *Server) Open() int64 { return s.open.Load() }

// Check answers SERVING.
func (s *Server) Check(context.Context, *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// Watch sends SERVING, then ends the stream, or for [HoldService] holds
// it until the client ends it.
func (s *Server) Watch(req *grpc_health_v1.HealthCheckRequest, ss grpc.ServerStreamingServer[grpc_health_v1.HealthCheckResponse]) error {
	if err := ss.Send(&grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}); err != nil {
		return err
	}
	if req.GetService() == HoldService {
		<-ss.Context().Done()
	}
	return nil
}
