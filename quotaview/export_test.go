package quotaview

// Tenants returns how many tenants r counts one by one, over all rules.
func (r *Recorder) Tenants() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.rules {
		n += len(s.tenants)
	}
	return n
}
