package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// windowOut is one window as explain and peek print it. Keys are
// pseudonymised: no raw identity reaches them.
type windowOut struct {
	Dimension string `json:"dimension"`
	Window    string `json:"window"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`
	Key       string `json:"key"`
	// Slot is the key's Redis Cluster hash slot.
	Slot uint16 `json:"slot"`
	// SharedKey: other windows of the request count on this key too
	// (one log per principal, docs/adr/015).
	SharedKey bool `json:"shared_key,omitempty"`
	// Peek only.
	Remaining    *int64 `json:"remaining,omitempty"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"`
	ResetAfterMS *int64 `json:"reset_after_ms,omitempty"`
	Blocked      *bool  `json:"blocked,omitempty"`
}

// decisionOut is one route's (or one domain's descriptors') windows.
type decisionOut struct {
	Route     string      `json:"route,omitempty"`
	Domain    string      `json:"domain,omitempty"`
	Profile   string      `json:"profile"`
	Family    string      `json:"family"`
	Plan      string      `json:"plan,omitempty"`
	Degraded  string      `json:"degraded"`
	Cost      int64       `json:"cost"`
	Reserving bool        `json:"reserving,omitempty"`
	Blocked   *bool       `json:"blocked,omitempty"`
	Windows   []windowOut `json:"windows"`
	Notes     []string    `json:"notes,omitempty"`
	// untouched: peeked, and no window holds any count.
	untouched bool
}

// explainedOut turns an Explanation into its output, leaving out the ip
// windows when no -ip was given (their key would be 0.0.0.0's).
func explainedOut(x app.Explanation, ipGiven bool) decisionOut {
	out := decisionOut{Profile: x.Profile, Family: x.Family.String(), Plan: x.Plan, Degraded: x.Degraded.String(), Cost: x.Cost, Reserving: x.Reserving}
	uses := map[string]int{}
	for _, w := range x.Windows {
		uses[w.Key]++
	}
	dropped := false
	for _, w := range x.Windows {
		if !ipGiven && w.Dimension == domain.DimensionIP {
			dropped = true
			continue
		}
		out.Windows = append(out.Windows, windowOut{
			Dimension: w.Dimension.String(), Window: w.Window.Name, Algorithm: w.Window.Algorithm.String(),
			Limit: w.Window.Limit, Period: w.Window.Period.String(), Key: w.Key, Slot: redis.Slot(w.Key),
			SharedKey: uses[w.Key] > 1,
		})
	}
	if dropped {
		out.Notes = append(out.Notes, "ip windows left out: give -ip to see them")
	}
	if len(x.Windows) == 0 || (dropped && len(out.Windows) == 0) {
		out.Notes = append(out.Notes, "no window of this profile counts these identities: nothing limits them here")
	}
	return out
}

// withPeek adds a peek's per-window answers to out, made from the same
// request's Explanation: the decision lists the windows in the
// Explanation's order. It reports whether no window shown
// holds any count.
func withPeek(out *decisionOut, x app.Explanation, d domain.Decision, ipGiven bool) (untouched bool) {
	checks := d.Windows.All()
	blocked := false
	untouched = true
	row := 0
	shown := out.Windows[:0]
	for i, w := range x.Windows {
		if i >= len(checks) {
			break
		}
		c := checks[i]
		if !ipGiven && w.Dimension == domain.DimensionIP {
			continue
		}
		o := out.Windows[row]
		row++
		rem, retry, reset, b := c.Remaining, c.RetryAfter.Milliseconds(), c.ResetAfter.Milliseconds(), !c.Allowed
		o.Remaining, o.RetryAfterMS, o.ResetAfterMS, o.Blocked = &rem, &retry, &reset, &b
		blocked = blocked || b
		if c.Remaining < w.Window.Limit || c.ResetAfter > 0 {
			untouched = false
		}
		shown = append(shown, o)
	}
	out.Windows = shown
	out.Blocked = &blocked
	return untouched
}

// untouchedNote is added when no window peeked holds any count: a secret
// other than the service's names other keys, which hold nothing.
const untouchedNote = "no window holds any count for these identities (nothing since their windows passed, or a reset); if they are refused nonetheless, check that RATE_LIMIT_HMAC_SECRET is the service's (another secret names other keys) and the identities are spelled as the service sees them"

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printDecision prints one decisionOut as a table.
func printDecision(w io.Writer, d decisionOut, peek bool) {
	head := "route " + d.Route
	if d.Domain != "" {
		head = "domain " + d.Domain
	}
	fmt.Fprintf(w, "%s: profile %s (family %s, degraded: %s), cost %d", head, d.Profile, d.Family, d.Degraded, d.Cost)
	if d.Plan != "" {
		fmt.Fprintf(w, ", plan %s", d.Plan)
	}
	if d.Reserving {
		fmt.Fprint(w, ", reserving")
	}
	if d.Blocked != nil {
		if *d.Blocked {
			fmt.Fprint(w, ": BLOCKED")
		} else {
			fmt.Fprint(w, ": not blocked")
		}
	}
	fmt.Fprintln(w)
	if len(d.Windows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if peek {
			fmt.Fprintln(tw, "  DIMENSION\tWINDOW\tALGORITHM\tLIMIT\tPERIOD\tREMAINING\tRETRY IN\tRESETS IN\tSTATE")
		} else {
			fmt.Fprintln(tw, "  DIMENSION\tWINDOW\tALGORITHM\tLIMIT\tPERIOD\tSLOT\tKEY")
		}
		for _, o := range d.Windows {
			name := o.Window
			if peek {
				state := "ok"
				if *o.Blocked {
					state = "BLOCKED"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", o.Dimension, name, o.Algorithm, o.Limit, o.Period,
					*o.Remaining, ms(*o.RetryAfterMS), ms(*o.ResetAfterMS), state)
				continue
			}
			key := o.Key
			if o.SharedKey {
				key += " (shared)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%d\t%s\n", o.Dimension, name, o.Algorithm, o.Limit, o.Period, o.Slot, key)
		}
		_ = tw.Flush()
	}
	for _, n := range d.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
}

func ms(v int64) string {
	if v <= 0 {
		return "-"
	}
	return (time.Duration(v) * time.Millisecond).String()
}

// joinQuoted quotes and joins names for a sentence.
func joinQuoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
