package main

import (
	"context"
	"net"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// env is what every part shares: the redis-server this program started,
// an admin client whose commands (INFO, SCAN, MEMORY USAGE) are not
// counted, and the count of commands the contenders' clients send.
type env struct {
	addr  string
	admin *redis.Client
	sent  *sentCounter

	mu      sync.Mutex
	clients []*redis.Client // closed by close
}

// newEnv returns the env of the redis-server at addr.
func newEnv(addr string) *env {
	return &env{addr: addr, admin: redis.NewClient(&redis.Options{Addr: addr}), sent: &sentCounter{}}
}

// client returns a new client of the server, configured by o, whose
// commands are counted. Every contender of every part gets its clients
// from here, so all use the same configuration: go-redis's defaults
// (MaxRetries 3) with a pool of 128 connections, unless o says otherwise.
func (e *env) client(o redis.Options) *redis.Client {
	o.Addr = e.addr
	if o.PoolSize == 0 {
		o.PoolSize = 128
	}
	c := redis.NewClient(&o)
	c.AddHook(e.sent)
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	return c
}

// instances returns n clients with the default configuration: n separate
// instances of a service.
func (e *env) instances(n int) []*redis.Client {
	cs := make([]*redis.Client, n)
	for i := range cs {
		cs[i] = e.client(redis.Options{})
	}
	return cs
}

// close closes every client.
func (e *env) close() {
	for _, c := range e.clients {
		_ = c.Close()
	}
	_ = e.admin.Close()
}

// sentCounter is a go-redis hook that counts the commands its clients
// send: one per command, each command of a pipeline counted. A script
// call is one command, whatever the script does inside Redis.
type sentCounter struct{ n atomic.Int64 }

// DialHook passes dials through.
func (s *sentCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// ProcessHook counts one command.
func (s *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of the pipeline.
func (s *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// serverStats is what Redis reports it did, cumulatively.
type serverStats struct {
	cmds    int64         // commands executed, those scripts ran included; INFO excluded
	cpu     time.Duration // used_cpu_user + used_cpu_sys of redis-server
	scripts time.Duration // time spent running EVALSHA and EVAL (INFO commandstats usec): no I/O
}

// sub returns s - o.
func (s serverStats) sub(o serverStats) serverStats {
	return serverStats{cmds: s.cmds - o.cmds, cpu: s.cpu - o.cpu, scripts: s.scripts - o.scripts}
}

// stats reads INFO commandstats and cpu.
func (e *env) stats(ctx context.Context) (serverStats, error) {
	info, err := e.admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, err
	}
	var s serverStats
	for _, line := range strings.Split(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, _ := strconv.ParseFloat(value, 64)
			s.cpu += time.Duration(f * 1e9)
		case strings.HasPrefix(name, "cmdstat_") && !strings.HasPrefix(name, "cmdstat_info"):
			script := name == "cmdstat_evalsha" || name == "cmdstat_eval"
			for _, f := range strings.Split(value, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.cmds += n
				} else if v, ok := strings.CutPrefix(f, "usec="); ok && script {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.scripts += time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	return s, nil
}

// snapshot is what the contenders' clients sent and what Redis did, at
// one instant.
type snapshot struct {
	sent   int64
	srv    serverStats
	cpu    time.Duration // this process's CPU: the clients' side
	allocs int64         // heap objects this process allocated (runtime/metrics)
}

// snap takes a snapshot.
func (e *env) snap(ctx context.Context) (snapshot, error) {
	srv, err := e.stats(ctx)
	return snapshot{sent: e.sent.n.Load(), srv: srv, cpu: processCPU(), allocs: heapAllocs()}, err
}

// since returns what happened between o and s.
func (s snapshot) since(o snapshot) snapshot {
	return snapshot{sent: s.sent - o.sent, srv: s.srv.sub(o.srv), cpu: s.cpu - o.cpu, allocs: s.allocs - o.allocs}
}

// heapAllocs returns how many heap objects this process has allocated.
func heapAllocs() int64 {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(m[0].Value.Uint64())
}

// redisVersion returns the server's version, or "?".
func (e *env) redisVersion(ctx context.Context) string {
	info, err := e.admin.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// warmPools opens n connections in each client's pool, so that no
// contender pays for dialing while it is measured.
func warmPools(ctx context.Context, cs []*redis.Client, n int) {
	var wg sync.WaitGroup
	for _, c := range cs {
		for range n {
			wg.Go(func() { _ = c.Ping(ctx).Err() })
		}
	}
	wg.Wait()
}
