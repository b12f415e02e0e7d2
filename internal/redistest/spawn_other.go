//go:build !linux

package redistest

import "os/exec"

// startProcess starts cmd. Outside Linux there is no parent-death signal:
// servers are stopped by Main and t.Cleanup only.
func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
