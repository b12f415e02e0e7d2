package httpmw

import (
	"io"
	"net/http"
)

// statusWriter records the final status a handler answers with, for the
// settlement of a reservation (Failed = 5xx). It is what the handler of a
// reserving route writes to; Unwrap lets http.ResponseController reach
// the server's own writer (deadlines, full duplex).
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader records a final status (1xx are informational: the final
// one follows) and passes it on.
func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the server's writer, for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Status is the final status written, 200 when the handler wrote a body,
// flushed or wrote nothing (what net/http then sends).
func (s *statusWriter) Status() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// wrapStatus returns a writer that records the status on s and has
// exactly the optional interfaces of w among http.Flusher, http.Hijacker,
// io.ReaderFrom and http.Pusher: a handler that asserts one finds it when
// the server's writer has it, and not otherwise. The optional methods go
// to w directly; each can only send the implicit 200, which Status
// already assumes.
func wrapStatus(w http.ResponseWriter, s *statusWriter) http.ResponseWriter {
	s.ResponseWriter = w
	f, isF := w.(http.Flusher)
	h, isH := w.(http.Hijacker)
	rf, isR := w.(io.ReaderFrom)
	p, isP := w.(http.Pusher)
	type (
		F = http.Flusher
		H = http.Hijacker
		R = io.ReaderFrom
		P = http.Pusher
	)
	switch bits(isF, 1) | bits(isH, 2) | bits(isR, 4) | bits(isP, 8) {
	case 1:
		return struct {
			*statusWriter
			F
		}{s, f}
	case 2:
		return struct {
			*statusWriter
			H
		}{s, h}
	case 3:
		return struct {
			*statusWriter
			F
			H
		}{s, f, h}
	case 4:
		return struct {
			*statusWriter
			R
		}{s, rf}
	case 5:
		return struct {
			*statusWriter
			F
			R
		}{s, f, rf}
	case 6:
		return struct {
			*statusWriter
			H
			R
		}{s, h, rf}
	case 7:
		return struct {
			*statusWriter
			F
			H
			R
		}{s, f, h, rf}
	case 8:
		return struct {
			*statusWriter
			P
		}{s, p}
	case 9:
		return struct {
			*statusWriter
			F
			P
		}{s, f, p}
	case 10:
		return struct {
			*statusWriter
			H
			P
		}{s, h, p}
	case 11:
		return struct {
			*statusWriter
			F
			H
			P
		}{s, f, h, p}
	case 12:
		return struct {
			*statusWriter
			R
			P
		}{s, rf, p}
	case 13:
		return struct {
			*statusWriter
			F
			R
			P
		}{s, f, rf, p}
	case 14:
		return struct {
			*statusWriter
			H
			R
			P
		}{s, h, rf, p}
	case 15:
		return struct {
			*statusWriter
			F
			H
			R
			P
		}{s, f, h, rf, p}
	}
	return s
}

func bits(ok bool, b int) int {
	if ok {
		return b
	}
	return 0
}
