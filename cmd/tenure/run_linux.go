package main

import "syscall"

// setDeathSignal makes the kernel kill the command if tenure run dies
// without passing on a signal (SIGKILL): it must not go on without its
// lease being renewed.
func setDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
