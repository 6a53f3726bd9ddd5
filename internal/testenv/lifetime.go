package testenv

// Processes that die with the test: a test binary killed from outside (a
// timeout around make, SIGKILL of go test) must leave no server or worker
// running, reparented to init.

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Own makes cmd (before Start) a process the test binary owns: in its own
// process group (a Ctrl-C on go test reaches the test first, which stops it
// by process; a signal to it touches nothing else) and, on Linux, killed by
// the kernel (SIGKILL) when the test binary dies, however it dies.
func Own(cmd *exec.Cmd) { own(cmd) }

// ExitWithParent makes the test binary exit (status 2) as soon as the
// process that started it (go test) is gone: go test killed with SIGKILL
// does not take its test binary along, which would go on running (and
// keep its servers) reparented to init. Its own processes (Own) then die
// with it. Call it once, from TestMain.
func ExitWithParent() {
	ppid := os.Getppid()
	if ppid == 1 {
		return // started by init (or a container's): nothing to watch
	}
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			if os.Getppid() != ppid {
				fmt.Fprintf(os.Stderr, "testenv: the parent process (pid %d) is gone: exiting, with every process this test owns\n", ppid)
				os.Exit(2)
			}
		}
	}()
}
