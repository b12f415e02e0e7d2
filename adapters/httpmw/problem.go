package httpmw

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/domain"
)

// Problem types of draft-ietf-httpapi-ratelimit-headers (RFC 9457 problem
// details), the type members of the 429 and 503 bodies.
const (
	// ProblemQuotaExceeded is the type of a 429: one or more quota
	// policies were exceeded.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemTemporaryReducedCapacity is the type of a 503 while the
	// shared store cannot answer and the route fails closed.
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// InvalidContextBody is the body of every 400, whatever the cause (an
// invalid or unprofiled route, an unresolved client address, a malformed
// identity): one answer, so that a client cannot tell the causes apart
// (the cause goes to logs and metrics only).
const InvalidContextBody = `{"error":"invalid_context"}`

// problem is an RFC 9457 problem details object with the draft's
// violated-policies extension member.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// writeRefusal answers a decision that blocks: 429, 503 or 400.
func writeRefusal(w http.ResponseWriter, d *domain.Decision) {
	h := w.Header()
	switch d.State {
	case domain.Throttled:
		setRateLimitHeaders(h, d)
		h.Set(keyRetryAfter, strconv.FormatInt(d.RetryAfterSeconds(), 10))
		writeProblem(w, problem{
			Type:             ProblemQuotaExceeded,
			Title:            "Request cannot be satisfied as assigned quota has been exceeded",
			Status:           http.StatusTooManyRequests,
			ViolatedPolicies: d.ViolatedPolicies(),
		})
	case domain.DeniedDegraded:
		setRateLimitHeaders(h, d)
		h.Set(keyRetryAfter, strconv.FormatInt(d.RetryAfterSeconds(), 10))
		p := problem{
			Type:   ProblemTemporaryReducedCapacity,
			Title:  "Request cannot be satisfied due to temporary server capacity constraints",
			Status: http.StatusServiceUnavailable,
		}
		if d.Cause == domain.CauseLocalCapExceeded {
			p.ViolatedPolicies = d.ViolatedPolicies()
		}
		writeProblem(w, p)
	default:
		writeInvalidContext(w)
	}
}

// writeInvalidContext writes the uniform 400.
func writeInvalidContext(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(InvalidContextBody)))
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(InvalidContextBody))
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// A struct of strings and an int always marshals.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
