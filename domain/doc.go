// Package domain is the pure core of sluice: windows and their two
// algorithms, limits and store results, decisions and their terminal states,
// the system health machine, route profiles with the degraded matrix, key
// building and the typed errors with stable codes.
//
// The package imports the standard library only, performs no I/O, starts no
// goroutine and never reads the wall clock: every function that depends on
// time takes `now` as an argument, as golang.org/x/time/rate does.
package domain
