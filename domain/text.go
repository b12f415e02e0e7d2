package domain

import "fmt"

// The enums a configuration names implement encoding.TextMarshaler and
// encoding.TextUnmarshaler, so that YAML, JSON and flag decoders read them
// by name ("gcra", "auth", "deny", "apikey") and refuse anything else with
// the list of valid names. Their String method gives the same names.

// MarshalText returns the algorithm's name.
func (a Algorithm) MarshalText() ([]byte, error) { return marshalKnown(a, a <= GCRA) }

// UnmarshalText reads "sliding_log" (or "") or "gcra".
func (a *Algorithm) UnmarshalText(b []byte) error { return unmarshalWith(a, ParseAlgorithm, b) }

// MarshalText returns the family's name.
func (f RouteFamily) MarshalText() ([]byte, error) {
	return marshalKnown(f, f == 0 || (f >= FamilyRead && f <= FamilyCostly))
}

// UnmarshalText reads "read", "auth" or "costly".
func (f *RouteFamily) UnmarshalText(b []byte) error { return unmarshalWith(f, ParseRouteFamily, b) }

// MarshalText returns the action's name ("" for the zero value).
func (a DegradedAction) MarshalText() ([]byte, error) {
	if a == 0 {
		return []byte{}, nil
	}
	return marshalKnown(a, a >= ActionBypass && a <= ActionLocal)
}

// UnmarshalText reads "bypass", "deny" or "local".
func (a *DegradedAction) UnmarshalText(b []byte) error {
	return unmarshalWith(a, ParseDegradedAction, b)
}

// MarshalText returns the dimension's name.
func (d Dimension) MarshalText() ([]byte, error) {
	return marshalKnown(d, d >= DimensionIP && d <= DimensionTenantGlobal)
}

// UnmarshalText reads "ip", "user", "apikey", "tenant" or "tenant_global".
func (d *Dimension) UnmarshalText(b []byte) error { return unmarshalWith(d, ParseDimension, b) }

func marshalKnown(v fmt.Stringer, known bool) ([]byte, error) {
	if !known {
		return nil, fmt.Errorf("sluice: cannot marshal %s", v)
	}
	return []byte(v.String()), nil
}

func unmarshalWith[T any](dst *T, parse func(string) (T, error), b []byte) error {
	v, err := parse(string(b))
	if err != nil {
		return err
	}
	*dst = v
	return nil
}
