package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
)

// exitError carries a command's exit code; printed says its message is
// already on stderr (located configuration errors).
type exitError struct {
	code    int
	err     error
	printed bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// fail gives err an exit code.
func fail(code int, err error) error { return &exitError{code: code, err: err} }

// usageErr is a usage error with its message.
func usageErr(format string, args ...any) error {
	return fail(exitUsage, fmt.Errorf(format, args...))
}

// report prints err (unless printed) and returns its exit code.
func report(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !ee.printed {
			fmt.Fprintln(stderr, "sluice:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "sluice:", err)
	if errors.Is(err, domain.ErrStoreTimeout) {
		fmt.Fprintln(stderr, "sluice: the store answered after the configuration's store_timeout: over a slow link, raise -store-timeout")
	}
	return codeOf(err)
}

// codeOf classifies an error the Limiter or a loader returned.
func codeOf(err error) int {
	var ce *domain.ContextError
	switch {
	case isSecretError(err):
		return exitSecret
	case errors.Is(err, domain.ErrStoreUnavailable), errors.Is(err, domain.ErrStoreTimeout):
		return exitStore
	case errors.Is(err, envoyrls.ErrUnknownDomain), errors.Is(err, envoyrls.ErrNoLimit):
		return exitUnknown
	case errors.As(err, &ce):
		if ce.Cause == domain.CauseProfileMissing || ce.Cause == domain.CauseRouteInvalid {
			return exitUnknown
		}
		return exitBadIdentity
	case errors.Is(err, domain.ErrInvalidConfig):
		return exitInvalid
	}
	return exitInvalid
}

func isSecretError(err error) bool {
	return errors.Is(err, app.ErrSecretMissing) || errors.Is(err, app.ErrSecretShort) || errors.Is(err, app.ErrSecretMalformed)
}

// leaves flattens the trees errors.Join builds into their leaves, in
// order; an error wrapping one other (fmt.Errorf with one %w) is a leaf.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}
