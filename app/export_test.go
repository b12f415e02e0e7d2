package app

// NewWithTickHook is New with a hook the health loop calls after each
// tick it has processed, so that tests can wait for the loop without
// sleeping.
func NewWithTickHook(cfg Config, deps Deps, hook func()) (*Limiter, error) {
	return newLimiter(cfg, deps, hook)
}

// Queued returns how many decisions wait in coalesced batches for their
// key set's next store call.
func (l *Limiter) Queued() int {
	if l.coalesce == nil {
		return 0
	}
	n := 0
	for i := range l.coalesce.shards {
		sh := &l.coalesce.shards[i]
		sh.mu.Lock()
		for _, f := range sh.sets {
			if f.next != nil {
				n += f.next.present
			}
		}
		sh.mu.Unlock()
	}
	return n
}
