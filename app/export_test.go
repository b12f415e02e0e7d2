package app

// NewWithTickHook is New with a hook the health loop calls after each
// tick it has processed, so that tests can wait for the loop without
// sleeping.
func NewWithTickHook(cfg Config, deps Deps, hook func()) (*Limiter, error) {
	return newLimiter(cfg, deps, hook)
}
