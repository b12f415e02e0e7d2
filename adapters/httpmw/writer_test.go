package httpmw

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// everything is a writer with every optional interface wrapStatus keeps.
type everything struct{ *httptest.ResponseRecorder }

func (everything) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (everything) ReadFrom(io.Reader) (int64, error)    { return 0, nil }
func (everything) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

type (
	rw = http.ResponseWriter
	fl = http.Flusher
	hj = http.Hijacker
	rf = io.ReaderFrom
	pu = http.Pusher
)

// TestWrapStatusKeepsExactlyTheInterfaces: for each of the 16 sets of
// optional interfaces a server's writer may have, the wrapped writer has
// the same set, unwraps to the server's, and records the final status.
func TestWrapStatusKeepsExactlyTheInterfaces(t *testing.T) {
	e := everything{httptest.NewRecorder()}
	writers := []http.ResponseWriter{
		struct{ rw }{e},
		struct {
			rw
			fl
		}{e, e},
		struct {
			rw
			hj
		}{e, e},
		struct {
			rw
			fl
			hj
		}{e, e, e},
		struct {
			rw
			rf
		}{e, e},
		struct {
			rw
			fl
			rf
		}{e, e, e},
		struct {
			rw
			hj
			rf
		}{e, e, e},
		struct {
			rw
			fl
			hj
			rf
		}{e, e, e, e},
		struct {
			rw
			pu
		}{e, e},
		struct {
			rw
			fl
			pu
		}{e, e, e},
		struct {
			rw
			hj
			pu
		}{e, e, e},
		struct {
			rw
			fl
			hj
			pu
		}{e, e, e, e},
		struct {
			rw
			rf
			pu
		}{e, e, e},
		struct {
			rw
			fl
			rf
			pu
		}{e, e, e, e},
		struct {
			rw
			hj
			rf
			pu
		}{e, e, e, e},
		e,
	}
	set := func(w http.ResponseWriter) [4]bool {
		_, f := w.(http.Flusher)
		_, h := w.(http.Hijacker)
		_, r := w.(io.ReaderFrom)
		_, p := w.(http.Pusher)
		return [4]bool{f, h, r, p}
	}
	seen := map[[4]bool]bool{}
	for i, w := range writers {
		s := &statusWriter{}
		got := wrapStatus(w, s)
		assert.Equal(t, set(w), set(got), "writer %d", i)
		seen[set(w)] = true
		u, ok := got.(interface{ Unwrap() http.ResponseWriter })
		if assert.True(t, ok, "writer %d unwraps", i) {
			assert.Equal(t, w, u.Unwrap(), "writer %d", i)
		}
		assert.Equal(t, http.StatusOK, s.Status(), "nothing written: 200")
		got.WriteHeader(http.StatusEarlyHints)
		got.WriteHeader(http.StatusBadGateway)
		got.WriteHeader(http.StatusOK)
		assert.Equal(t, http.StatusBadGateway, s.Status(), "the first final status, past a 1xx")
	}
	assert.Len(t, seen, 16, "every set of interfaces is covered")
}
