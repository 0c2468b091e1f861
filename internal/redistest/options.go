package redistest

// An Option configures the servers started by [Start], [StartCluster],
// [StartMain] and [StartClusterMain].
type Option func(*config)

type config struct {
	args []string
}

// Args adds redis-server command-line arguments, for example
// Args("--maxmemory", "10mb"). They come after the package's defaults, so
// they override them. Options accumulate: Args may be given more than once.
func Args(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}
