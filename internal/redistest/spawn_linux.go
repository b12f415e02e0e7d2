package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Linux delivers a parent-death signal when the *thread* that started the
// child exits, not the process. Go may retire an OS thread, so every server
// is started from one goroutine locked to a thread that lives as long as
// the test binary: the signal then fires exactly when the binary dies.
var (
	spawnOnce  sync.Once
	spawnCalls chan spawnCall
)

type spawnCall struct {
	cmd  *exec.Cmd
	done chan error
}

func startProcess(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCalls = make(chan spawnCall)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must outlive every child
			for c := range spawnCalls {
				c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				c.done <- c.cmd.Start()
			}
		}()
	})
	c := spawnCall{cmd: cmd, done: make(chan error, 1)}
	spawnCalls <- c
	return <-c.done
}
