// Package quotaserver is a gRPC server that enforces a published quota
// exactly, for the tests and the example of grpcthrottle: the standard
// health service (grpc.health.v1.Health) behind a token bucket on the
// server's own clock, which answers RESOURCE_EXHAUSTED with an
// errdetails.RetryInfo beyond it, as Google's APIs do.
package quotaserver

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
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

	now func() time.Time

	mu     sync.Mutex
	bucket bucket
	calls  []Call
	first  time.Time // first admission
	last   time.Time // last admission

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
	s := &Server{now: now, bucket: bucket{q: q}, lis: lis, done: make(chan struct{})}
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

// bucket is the quota's token bucket (GCRA): the server's, and the one
// [Quota.Over] replays sent instants through.
type bucket struct {
	q   Quota
	tat time.Time // the theoretical arrival time
}

// take takes a token at now: 0, or how long until one is free.
func (b *bucket) take(now time.Time) time.Duration {
	interval := b.q.Per / time.Duration(b.q.Rate)
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(interval)
	if wait := tat.Sub(now) - time.Duration(b.q.Burst)*interval; wait > 0 {
		return wait
	}
	b.tat = tat
	return 0
}

// Over is how many calls sent at the instants sent (in any order) a
// bucket of q would refuse if each arrived the instant it was sent: zero
// when the clients kept to the quota, whatever time their calls then took
// to reach the server.
func (q Quota) Over(sent []time.Time) int {
	sent = slices.SortedFunc(slices.Values(sent), time.Time.Compare)
	b := bucket{q: q}
	over := 0
	for _, t := range sent {
		if b.take(t) > 0 {
			over++
		}
	}
	return over
}

// take takes a token for a call sent at sent (zero: not stamped): nil,
// or the RESOURCE_EXHAUSTED status to answer.
func (s *Server) take(sent time.Time) error {
	s.mu.Lock()
	now := s.now()
	wait := s.bucket.take(now)
	s.calls = append(s.calls, Call{Sent: sent, Arrived: now, Refused: wait > 0})
	if wait > 0 {
		s.mu.Unlock()
		s.refused.Add(1)
		st, _ := status.New(codes.ResourceExhausted, "quota exceeded").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		return st.Err()
	}
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.mu.Unlock()
	s.admitted.Add(1)
	return nil
}

// SentKey is the metadata key under which [Stamp] sends the instant a
// call was sent, in nanoseconds since the epoch.
const SentKey = "quotaserver-sent"

// Stamp is a unary client interceptor that tells the server when each
// call was sent ([Call].Sent): chained after a limiter's, it stamps the
// instant the limiter let the call go.
func Stamp(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, SentKey, strconv.FormatInt(time.Now().UnixNano(), 10))
	return invoke(ctx, method, req, reply, cc, opts...)
}

// sentAt returns the instant [Stamp] put in ctx's metadata, or zero.
func sentAt(ctx context.Context) time.Time {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(SentKey); len(v) == 1 {
		if ns, err := strconv.ParseInt(v[0], 10, 64); err == nil {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// A Call is what the server saw of one call.
type Call struct {
	Sent    time.Time // when the client sent it ([Stamp]), or zero
	Arrived time.Time // when it took its token, on the server's clock
	Refused bool      // answered RESOURCE_EXHAUSTED
}

// Calls returns every call the server has seen, in the order they took
// their tokens.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *Server) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.take(sentAt(ctx)); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.take(sentAt(ss.Context())); err != nil {
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
