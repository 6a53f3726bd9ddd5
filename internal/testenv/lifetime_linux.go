package testenv

import (
	"os/exec"
	"syscall"
)

func own(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// The kernel signals the child when the thread that started it ends;
	// the Go runtime keeps its threads for the process's life (none of
	// these tests lock one to a goroutine), so that is when the test dies.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
