package httpmw

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice/domain"
)

// fuzzDuration maps a fuzz input onto the durations a decision can carry:
// from a little below zero to twice domain.MaxPeriod, in microseconds.
func fuzzDuration(us int64) time.Duration {
	span := int64(2*domain.MaxPeriod/time.Microsecond) + 2_000_000
	if us < 0 {
		us = -(us + 1)
	}
	return time.Duration(us%span-1_000_000) * time.Microsecond
}

// FuzzRefusalHeaders writes the response of any decision the pipeline can
// produce, window names included (profile and window names are
// configuration, but nothing here trusts them): no header value may hold
// a control character (no header injection), the draft's fields parse as
// RFC 9651 lists whose numbers agree with the X-RateLimit trio, a refusal
// carries a Retry-After of at least one second and no earlier than the
// RateLimit field's t, and every 400 is the uniform body with no
// rate-limit header. Seeds: testdata/fuzz.
func FuzzRefusalHeaders(f *testing.F) {
	f.Add(uint8(domain.Allowed), int64(20), int64(19), int64(0), int64(50_000), "burst", int64(1_000_000), uint8(1), uint8(2))
	f.Add(uint8(domain.Throttled), int64(5), int64(0), int64(250_000), int64(900_000), "sustained", int64(60_000_000), uint8(2), uint8(3))
	f.Add(uint8(domain.DeniedDegraded), int64(10), int64(0), int64(1_000_000), int64(0), "degraded_cap", int64(60_000_000), uint8(1), uint8(1))
	f.Add(uint8(domain.DeniedDegraded), int64(0), int64(0), int64(1_000_000), int64(0), "", int64(0), uint8(0), uint8(0))
	f.Add(uint8(domain.RejectedInvalidContext), int64(0), int64(0), int64(0), int64(0), "", int64(0), uint8(0), uint8(0))
	f.Add(uint8(domain.Throttled), int64(3), int64(-4), int64(1), int64(-1), "we\"ird\\\r\nname\x7fé", int64(1500), uint8(5), uint8(16))
	f.Fuzz(func(t *testing.T, state uint8, limit, remaining, retryUS, resetUS int64, window string, periodUS int64, dim uint8, windows uint8) {
		d := domain.Decision{
			State: domain.State(1 + state%5), Limit: limit, Remaining: remaining,
			RetryAfter: fuzzDuration(retryUS), ResetAfter: fuzzDuration(resetUS),
			LimitingDimension: domain.Dimension(dim % 7), LimitingWindow: window, LimitingPeriod: fuzzDuration(periodUS),
		}
		for i := range int(windows % (domain.MaxLimits + 2)) {
			d.Windows.Add(domain.WindowCheck{
				Dimension: domain.Dimension((int(dim) + i) % 7),
				Window:    domain.Window{Name: window + strconv.Itoa(i), Limit: limit + int64(i), Period: fuzzDuration(periodUS * int64(i+1))},
				Allowed:   i%2 == 0, Remaining: remaining - int64(i),
				RetryAfter: fuzzDuration(retryUS + int64(i)), ResetAfter: fuzzDuration(resetUS - int64(i)),
			})
		}
		w := httptest.NewRecorder()
		if d.Blocks() {
			writeRefusal(w, &d)
		} else {
			setRateLimitHeaders(w.Header(), &d)
			w.WriteHeader(http.StatusOK)
		}
		checkResponse(t, &d, w)
	})
}

func checkResponse(t *testing.T, d *domain.Decision, w *httptest.ResponseRecorder) {
	t.Helper()
	h := w.Header()
	for name, values := range h {
		for _, v := range values {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] == 0x7f {
					t.Fatalf("header %s holds control byte %#x: %q", name, v[i], v)
				}
			}
		}
	}
	switch d.State {
	case domain.RejectedInvalidContext:
		if w.Code != http.StatusBadRequest || w.Body.String() != InvalidContextBody {
			t.Fatalf("invalid context answered %d %q", w.Code, w.Body.String())
		}
		for _, name := range []string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderPolicy, HeaderRateLimit, HeaderRetryAfter} {
			if h.Get(name) != "" {
				t.Fatalf("a 400 carries %s: %q", name, h.Get(name))
			}
		}
		return
	case domain.Throttled, domain.DeniedDegraded:
		want := map[domain.State]int{domain.Throttled: http.StatusTooManyRequests, domain.DeniedDegraded: http.StatusServiceUnavailable}[d.State]
		if w.Code != want || !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s answered %d with body %q", d.State, w.Code, w.Body.String())
		}
		retry, err := strconv.ParseInt(h.Get(HeaderRetryAfter), 10, 64)
		if err != nil || retry < 1 {
			t.Fatalf("%s: Retry-After %q, want whole seconds, at least 1", d.State, h.Get(HeaderRetryAfter))
		}
		if tp, ok := rateLimitT(t, h); ok && retry < tp {
			t.Fatalf("Retry-After %d is earlier than the RateLimit field's t=%d", retry, tp)
		}
	}
	if h.Get(HeaderPolicy) == "" {
		return
	}
	if _, err := httpsfv.UnmarshalList(h.Values(HeaderPolicy)); err != nil {
		t.Fatalf("RateLimit-Policy %q is not a structured-field list: %v", h.Get(HeaderPolicy), err)
	}
	rem, err := strconv.ParseInt(h.Get(HeaderRemaining), 10, 64)
	if err != nil || rem < 0 {
		t.Fatalf("X-RateLimit-Remaining %q", h.Get(HeaderRemaining))
	}
	if r := rateLimitParam(t, h, "r"); r != rem {
		t.Fatalf("RateLimit r=%d, X-RateLimit-Remaining %d", r, rem)
	}
}

// rateLimitT returns the t parameter of the RateLimit field, if any.
func rateLimitT(t *testing.T, h http.Header) (int64, bool) {
	t.Helper()
	if h.Get(HeaderRateLimit) == "" {
		return 0, false
	}
	return rateLimitParam(t, h, "t"), true
}

// rateLimitParam parses the RateLimit field and returns one integer
// parameter of its item.
func rateLimitParam(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(HeaderRateLimit))
	if err != nil || len(list) != 1 {
		t.Fatalf("RateLimit %q is not a one-item structured-field list: %v", h.Get(HeaderRateLimit), err)
	}
	item, ok := list[0].(httpsfv.Item)
	if !ok {
		t.Fatalf("RateLimit %q: not an item", h.Get(HeaderRateLimit))
	}
	v, _ := item.Params.Get(name)
	n, ok := v.(int64)
	if !ok || n < 0 {
		t.Fatalf("RateLimit %q: %s=%v, want a non-negative integer", h.Get(HeaderRateLimit), name, v)
	}
	return n
}
