package envoyrls

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ShapeEntry is one entry of a descriptor as Envoy builds it from a
// rate_limits action: its key, and its value when the action sends a
// fixed one (generic_key's descriptor_value). A Dynamic entry carries the
// request's value (a header, the client address), which may be anything.
type ShapeEntry struct {
	Key, Value string
	Dynamic    bool
}

// Reached is a limit a descriptor shape reaches (Config.Reach).
type Reached struct {
	Limit Limit
	// Values holds, for each entry, the value that reaches Limit: a fixed
	// entry's own; for a dynamic one, the exact value or the wildcard
	// pattern the domain declares, or "" for any value it does not name.
	Values []string
}

// Stop is where the walk of a shape that reaches no limit ended.
type Stop struct {
	// Entry is the first entry whose key matches none of the descriptors
	// declared where the walk stood (the keys of Declared); len(shape)
	// when every entry matched and the descriptor the walk ended on has
	// no rate_limit. Of several walks (a dynamic entry's values), the
	// deepest.
	Entry    int
	Declared []string
}

// Reach lists the limits a request descriptor of this shape can match
// in domainName, as ShouldRateLimit matches one (Lookup's walk: the exact
// key and value, then the key's wildcard values in declared order, then
// the key alone). A fixed entry is matched as it is; a dynamic one as
// each value the domain declares for its key where the walk stands, as a
// value each wildcard matches, and as any other value: every limit some
// request can reach, and only those. When it reaches none, Stop says
// where the walk ended. An unconfigured domain is ErrUnknownDomain.
func (c *Config) Reach(domainName string, shape []ShapeEntry) ([]Reached, Stop, error) {
	d := c.domains[domainName]
	if d == nil {
		return nil, Stop{}, fmt.Errorf("%w: %q (configured: %v)", ErrUnknownDomain, domainName, c.Domains())
	}
	keys := make([]string, len(shape))
	for i, e := range shape {
		keys[i] = e.Key
	}
	// values are the ones walked; shown, what Reached says of them.
	values, shown := make([]string, len(shape)), make([]string, len(shape))
	var out []Reached
	stop := Stop{Entry: -1}
	var walk func(n *node, i int)
	walk = func(n *node, i int) {
		if i == len(shape) {
			// The matcher itself decides what these values reach.
			if m := d.match(keys, values); m.rule != nil {
				out = append(out, Reached{Limit: m.limit(), Values: slices.Clone(shown)})
			} else if i > stop.Entry {
				stop = Stop{Entry: i}
			}
			return
		}
		walked := map[*node]bool{}
		for _, v := range candidates(n, shape[i]) {
			next, wild := n.step(shape[i].Key, v)
			if next == nil || walked[next] {
				continue
			}
			walked[next] = true
			values[i], shown[i] = v, ""
			switch {
			case !shape[i].Dynamic:
				shown[i] = v
			case wild:
				shown[i] = next.pattern
			case n.exact[shape[i].Key+"_"+v] == next:
				shown[i] = v
			}
			walk(next, i+1)
		}
		if len(walked) == 0 && i > stop.Entry {
			stop = Stop{Entry: i, Declared: n.keys()}
		}
	}
	walk(d.root, 0)
	if len(out) > 0 {
		return out, Stop{}, nil
	}
	return nil, stop, nil
}

// anyOther is a value no configuration declares, nor, but for a bare
// '*', matches with a wildcard: a dynamic entry's "any other value".
const anyOther = "\x00"

// candidates are the values that take e down every branch of n that some
// request can take: e's own value when fixed; else each exact value of
// its key, a value of each of its wildcards ('*' as anyOther), and
// anyOther.
func candidates(n *node, e ShapeEntry) []string {
	if !e.Dynamic {
		return []string{e.Value}
	}
	vs := slices.Clone(n.values[e.Key])
	for _, w := range n.wildcards {
		if w.key == e.Key {
			vs = append(vs, strings.Join(w.parts, anyOther))
		}
	}
	return append(vs, anyOther)
}

// keys lists the keys declared at n, sorted.
func (n *node) keys() []string {
	set := map[string]bool{}
	for k, vs := range n.values {
		if len(vs) > 0 {
			set[k] = true
		}
	}
	for _, w := range n.wildcards {
		set[w.key] = true
	}
	for k := range n.any {
		set[k] = true
	}
	return slices.Sorted(maps.Keys(set))
}
