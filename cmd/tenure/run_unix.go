//go:build unix && !linux

package main

import "syscall"

// setDeathSignal does nothing here: only Linux kills a child when its
// parent dies.
func setDeathSignal(*syscall.SysProcAttr) {}
