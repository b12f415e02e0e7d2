package domain

import (
	"errors"
	"fmt"
)

// Code is a stable, documented error code. Codes are part of the public
// contract: logs, metrics and runbooks match on them, so they never change.
type Code string

// Stable error codes.
const (
	// CodeInvalidContext marks a request whose context (route, ip, identity)
	// cannot be evaluated (docs/adr/005).
	CodeInvalidContext Code = "ERR-172-03"
	// CodeInvalidConfig marks a configuration refused at boot
	// (docs/adr/005).
	CodeInvalidConfig Code = "ERR-172-05"
	// CodeStoreUnavailable marks a store that cannot answer (connection
	// refused, closed, script error).
	CodeStoreUnavailable Code = "ERR-STORE-01"
	// CodeStoreTimeout marks a store call that ran past its deadline.
	CodeStoreTimeout Code = "ERR-STORE-02"
	// CodeInvalidLimit marks a limit set handed to a store that breaks the
	// store contract (zero limit, empty key, too many keys...).
	CodeInvalidLimit Code = "ERR-STORE-03"
	// CodeCrossSlot marks a key set that would span two Redis Cluster hash
	// slots: a key-building bug, not an outage, refused before sending.
	CodeCrossSlot Code = "ERR-STORE-04"
	// CodeStoreValue marks a key whose stored value the store cannot
	// interpret (a wrong type, a malformed or out-of-range value written by
	// something other than sluice): that request's fault, never an outage.
	CodeStoreValue Code = "ERR-STORE-05"
	// CodeOverloaded marks a decision the instance shed: it waited for the
	// store past its bound (app.Config.ShedAfter) while the store had less
	// than its deadline. The instance is saturated, not the store
	// (docs/adr/008).
	CodeOverloaded Code = "ERR-SHED-01"
)

// Sentinel errors. Match them with errors.Is; the typed errors below wrap
// them.
var (
	// ErrInvalidContext is wrapped by every *ContextError.
	ErrInvalidContext = errors.New("sluice: invalid request context")
	// ErrInvalidConfig is wrapped by every *ConfigError.
	ErrInvalidConfig = errors.New("sluice: invalid configuration")
	// ErrInvalidLimit is wrapped by every *LimitError.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrStoreUnavailable is returned (wrapped) when a store cannot answer.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrStoreTimeout is returned (wrapped) when a store call exceeds its
	// deadline.
	ErrStoreTimeout = errors.New("sluice: store timeout")
	// ErrStoreClosed is returned by every store method called after Close.
	ErrStoreClosed = errors.New("sluice: store closed")
	// ErrCrossSlot is returned, before anything is sent, when the keys of one
	// request would land on two Redis Cluster hash slots.
	ErrCrossSlot = errors.New("sluice: keys span more than one hash slot")
	// ErrStoreValue is wrapped by every *StoreValueError.
	ErrStoreValue = errors.New("sluice: stored value cannot be interpreted")
	// ErrOverloaded is wrapped by the error of a decision the instance
	// shed (CodeOverloaded): it may wrap the store call's own timeout,
	// which the shed bound, not the store deadline, ended.
	ErrOverloaded = errors.New("sluice: instance overloaded: no store answer within shed_after")
	// ErrInvalidTransition is returned when a health transition that the
	// machine does not list is asked for.
	ErrInvalidTransition = errors.New("sluice: invalid health transition")
)

// CodeOf returns the stable code carried by err, or "" when err carries none.
func CodeOf(err error) Code {
	var ce interface{ Code() Code }
	if errors.As(err, &ce) {
		return ce.Code()
	}
	switch {
	case errors.Is(err, ErrOverloaded):
		return CodeOverloaded
	case errors.Is(err, ErrStoreTimeout):
		return CodeStoreTimeout
	case errors.Is(err, ErrCrossSlot):
		return CodeCrossSlot
	case errors.Is(err, ErrStoreValue):
		return CodeStoreValue
	case errors.Is(err, ErrLeaseEnded):
		return CodeLeaseEnded
	case errors.Is(err, ErrStoreUnavailable), errors.Is(err, ErrStoreClosed):
		return CodeStoreUnavailable
	case errors.Is(err, ErrInvalidLimit):
		return CodeInvalidLimit
	}
	return ""
}

// ContextError says why a request's context was refused. Its Cause goes to
// logs and metrics only: clients always see the same uniform body.
type ContextError struct {
	Cause Cause
	// Detail is a short, non-identifying explanation for the application log.
	// It never holds a raw identifier.
	Detail string
}

func (e *ContextError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("sluice %s: invalid context: %s", CodeInvalidContext, e.Cause)
	}
	return fmt.Sprintf("sluice %s: invalid context: %s: %s", CodeInvalidContext, e.Cause, e.Detail)
}

// Code returns CodeInvalidContext.
func (e *ContextError) Code() Code { return CodeInvalidContext }

// Unwrap lets errors.Is(err, ErrInvalidContext) match.
func (e *ContextError) Unwrap() error { return ErrInvalidContext }

// ConfigError names the configuration field that was refused at boot.
type ConfigError struct {
	// Field is the dotted path of the offending field, e.g. "hmac_secret" or
	// "profiles[login].windows.user[0].limit".
	Field string
	// Reason says what is wrong, e.g. "required", "must be 64 hex characters".
	Reason string
	// Err is an underlying error, if any.
	Err error
}

func (e *ConfigError) Error() string {
	msg := fmt.Sprintf("sluice %s: invalid configuration: %s: %s", CodeInvalidConfig, e.Field, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Code returns CodeInvalidConfig.
func (e *ConfigError) Code() Code { return CodeInvalidConfig }

// Is makes errors.Is(err, ErrInvalidConfig) match.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns the underlying error, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// LimitError says which limit of a request broke the store contract.
type LimitError struct {
	// Index is the position of the offending limit in the request, or -1
	// when the request as a whole is wrong (no limits, too many).
	Index int
	// Field is "key", "limit", "period", "cost", "algorithm" or "limits".
	Field  string
	Reason string
}

func (e *LimitError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("sluice %s: invalid limits: %s: %s", CodeInvalidLimit, e.Field, e.Reason)
	}
	return fmt.Sprintf("sluice %s: invalid limit %d: %s: %s", CodeInvalidLimit, e.Index, e.Field, e.Reason)
}

// Code returns CodeInvalidLimit.
func (e *LimitError) Code() Code { return CodeInvalidLimit }

// Unwrap lets errors.Is(err, ErrInvalidLimit) match.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

// UnknownNameError is returned when a name that must be one of a closed
// set (an algorithm, a route family, a degraded action, a dimension) is
// not. Configuration loaders use Name to point at the offending value.
type UnknownNameError struct {
	// Kind is what was named: "algorithm", "route family"...
	Kind string
	// Name is the name given.
	Name string
	// Valid lists the accepted names, for the message.
	Valid string
}

func (e *UnknownNameError) Error() string {
	return fmt.Sprintf("unknown %s %q (want %s)", e.Kind, e.Name, e.Valid)
}

// StoreValueError says that the store holds, under one key of a request, a
// value it cannot interpret: a wrong type, a malformed string, a number out
// of range. Nothing was read into a decision and nothing was written. It is
// a fault of that request (of that key), not of the store: it must not
// count toward the breaker.
type StoreValueError struct {
	// Index is the limit of the request whose key holds the value.
	Index int
	// Key is the store key (made of pseudonyms: safe to log).
	Key string
	// Reason says what was wrong with the value.
	Reason string
}

func (e *StoreValueError) Error() string {
	return fmt.Sprintf("sluice %s: limit %d: key %q holds a value the store cannot interpret: %s", CodeStoreValue, e.Index, e.Key, e.Reason)
}

// Code returns CodeStoreValue.
func (e *StoreValueError) Code() Code { return CodeStoreValue }

// Unwrap lets errors.Is(err, ErrStoreValue) match.
func (e *StoreValueError) Unwrap() error { return ErrStoreValue }
