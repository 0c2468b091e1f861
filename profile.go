package throttle

import (
	"fmt"

	"github.com/quotakit/throttle/internal/pattern"
	"github.com/quotakit/throttle/quotaheader"
)

// WithProfiles replaces [quotaheader.DefaultProfiles] (GitHub, X,
// Discord) for the transport: each [quotaheader.Profile] says how one
// vendor writes its resets and which answers mean "slow down". With no
// arguments no profile applies. [NewTransport] returns an error wrapping
// [ErrInvalidPolicy] if a profile's host pattern is invalid.
func WithProfiles(ps ...quotaheader.Profile) Option {
	return func(lim *Limiter) { lim.profileList = append([]quotaheader.Profile{}, ps...) }
}

// profile is a Profile with its host patterns parsed.
type profile struct {
	quotaheader.Profile
	hosts []pattern.Host
}

// compileProfiles parses the host patterns of ps.
func compileProfiles(ps []quotaheader.Profile) ([]profile, error) {
	out := make([]profile, 0, len(ps))
	for _, p := range ps {
		cp := profile{Profile: p}
		for _, h := range p.Hosts {
			hp, err := pattern.ParseHost(h)
			if err != nil {
				return nil, fmt.Errorf("%w: profile %s: %v", ErrInvalidPolicy, p.Name, err)
			}
			cp.hosts = append(cp.hosts, hp)
		}
		out = append(out, cp)
	}
	return out, nil
}

// profileFor returns the first profile for host, or nil.
func profileFor(ps []profile, host string) *quotaheader.Profile {
	for i := range ps {
		for _, h := range ps[i].hosts {
			if h.Match(host) {
				return &ps[i].Profile
			}
		}
	}
	return nil
}
