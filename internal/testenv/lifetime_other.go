//go:build !linux

package testenv

import (
	"os/exec"
	"syscall"
)

// Without a parent-death signal, only the process group: ExitWithParent
// and the tests' cleanups stop the processes.
func own(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
