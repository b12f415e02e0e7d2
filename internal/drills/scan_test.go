package drills

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/ports"
)

// rawScan looks for raw identifiers in what the application log may
// write: every field of a decision record but its raw ip and route (which
// only the security-audit channel may write), every field of a reset
// record but its ip and actor.
type rawScan struct {
	raws []string

	mu      sync.Mutex
	scanned int
	found   []string
}

// newRawScan looks for the given raw identities in every form the
// pipeline sees them: as given, trimmed, lower-cased, and for addresses
// their text and their /64.
func newRawScan(ids []string, ips []netip.Addr) *rawScan {
	s := &rawScan{}
	for _, id := range ids {
		s.raws = append(s.raws, id, strings.ToLower(strings.TrimSpace(id)))
	}
	for _, ip := range ips {
		s.raws = append(s.raws, ip.String())
		if ip.Is6() {
			p, _ := ip.Prefix(64)
			s.raws = append(s.raws, p.String(), strings.TrimSuffix(p.Addr().String(), "::"))
		}
	}
	return s
}

// look checks one text for every raw form.
func (s *rawScan) look(where, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scanned++
	for _, raw := range s.raws {
		if strings.Contains(text, raw) && len(s.found) < 10 {
			s.found = append(s.found, fmt.Sprintf("%s holds %q: %s", where, raw, text))
		}
	}
}

func (s *rawScan) decision(rec ports.DecisionRecord) {
	s.look("decision record", fmt.Sprintf("%+v tenant=%s latency=%s err=%v", rec.Decision, rec.TenantID, rec.StoreLatency, rec.Err))
}

func (s *rawScan) reset(rec ports.ResetRecord) {
	s.look("reset record", fmt.Sprintf("%s subject=%s tenant=%s keys=%d err=%v", rec.Dimension, rec.SubjectID, rec.TenantID, rec.Keys, rec.Err))
}

// result returns how many texts were scanned and what was found.
func (s *rawScan) result() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scanned, append([]string(nil), s.found...)
}
