package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helper processes of TestProcessesDieWithTheTest: this test binary
// run again, as the "middle" (what go test is to a test binary: it starts
// the "owner" and waits) or the "owner" (a test binary: it watches its
// parent and owns a sleep, then prints both pids and waits).
const helperEnv = "CAPPER_TESTENV_LIFETIME_HELPER"

func init() {
	switch os.Getenv(helperEnv) {
	case "middle":
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=owner")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	case "owner":
		ExitWithParent()
		sleep := exec.Command("sleep", "300")
		Own(sleep)
		if err := sleep.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(os.Getpid(), sleep.Process.Pid)
		select {}
	}
}

// TestProcessesDieWithTheTest: when what started a test binary (go test)
// is killed with SIGKILL, the test binary exits (ExitWithParent) and the
// processes it owns (Own) die with it; nothing is left reparented to init.
func TestProcessesDieWithTheTest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	middle := exec.Command(os.Args[0], "-test.run=^$")
	middle.Env = append(os.Environ(), helperEnv+"=middle")
	out, err := middle.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := middle.Start(); err != nil {
		t.Fatalf("start the helper: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = middle.Process.Kill()
		t.Fatalf("read the helper's pids: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		_ = middle.Process.Kill()
		t.Fatalf("helper printed %q, want two pids", line)
	}
	owner, _ := strconv.Atoi(f[0])
	sleep, _ := strconv.Atoi(f[1])
	t.Cleanup(func() { _ = syscall.Kill(owner, syscall.SIGKILL); _ = syscall.Kill(sleep, syscall.SIGKILL) })
	if !alive(owner) || !alive(sleep) {
		t.Fatalf("owner %d or its sleep %d is not running before the kill", owner, sleep)
	}

	_ = middle.Process.Signal(syscall.SIGKILL) // as kill -9 of go test
	_ = middle.Wait()
	deadline := time.Now().Add(30 * time.Second) // a bound, not a measure
	for alive(owner) || alive(sleep) {
		if time.Now().After(deadline) {
			t.Fatalf("after its parent was killed: owner %d alive %v, its sleep %d alive %v", owner, alive(owner), sleep, alive(sleep))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie, which waits for a reaper that
// may never come in a container, is not running).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
