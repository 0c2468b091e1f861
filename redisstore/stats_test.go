package redisstore_test

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Calls, Usec, Rejected, Failed int64
}

// commandStats returns INFO commandstats by command name ("evalsha").
func commandStats(c context.Context, r redis.UniversalClient) (map[string]cmdStat, error) {
	info, err := r.Info(c, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.Calls = n
			case "usec":
				s.Usec = n
			case "rejected_calls":
				s.Rejected = n
			case "failed_calls":
				s.Failed = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out, nil
}
