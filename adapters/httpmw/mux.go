package httpmw

import (
	"net/http"
	"slices"
	"sync"
)

// RequestPattern is the default RouteFunc: the ServeMux pattern that
// matched the request (http.Request.Pattern), set by the mux before it
// calls the handler it routed to. It is "" in a middleware that wraps the
// whole mux; use MuxRoute there.
func RequestPattern(r *http.Request) string { return r.Pattern }

// MuxRoute returns a RouteFunc for a middleware that wraps mux: it asks
// mux which pattern the request will be routed to, without serving it. A
// request the mux cannot route (404, 405) has no pattern, so it is
// refused as invalid context; a request the mux will redirect (a missing
// trailing slash, an unclean path) counts under the pattern it is
// redirected to. http.Request.Pattern is not read: an outer mux that
// routed the request to this one has set it to its own pattern.
func MuxRoute(mux *http.ServeMux) RouteFunc {
	return func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		return pattern
	}
}

// ServeMux is an http.ServeMux that remembers the patterns registered on
// it, for the boot check that every route has a profile:
//
//	if err := lim.CheckRoutes(mux.Patterns()); err != nil { ... }
//
// http.ServeMux cannot list its own patterns. Register every route through
// Handle or HandleFunc of this type (not of the embedded mux) so that none
// escapes the check.
type ServeMux struct {
	*http.ServeMux
	mu       sync.Mutex
	patterns []string
}

// NewServeMux returns an empty ServeMux.
func NewServeMux() *ServeMux { return &ServeMux{ServeMux: http.NewServeMux()} }

// Handle registers handler for pattern, as http.ServeMux.Handle does, and
// remembers the pattern.
func (m *ServeMux) Handle(pattern string, handler http.Handler) {
	m.ServeMux.Handle(pattern, handler)
	m.remember(pattern)
}

// HandleFunc registers handler for pattern, as http.ServeMux.HandleFunc
// does, and remembers the pattern.
func (m *ServeMux) HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request)) {
	m.ServeMux.HandleFunc(pattern, handler)
	m.remember(pattern)
}

func (m *ServeMux) remember(pattern string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.patterns = append(m.patterns, pattern)
}

// Patterns returns every pattern registered, in registration order.
func (m *ServeMux) Patterns() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.patterns)
}

// Route is MuxRoute of the embedded mux.
func (m *ServeMux) Route() RouteFunc { return MuxRoute(m.ServeMux) }
