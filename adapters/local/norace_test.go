//go:build !race

package local

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
