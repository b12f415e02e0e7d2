//go:build !unix

package redistest

import "io"

// lockPort reserves nothing where there is no flock: the probe in
// reservePort is then the only guard against another test binary.
func lockPort(int) (io.Closer, error) { return nil, nil }
