//go:build !unix

package main

import "os"

// handoffSignal: no SIGUSR1 here; 'tenure handoff' hands a grant off.
func handoffSignal() (<-chan os.Signal, func()) { return nil, func() {} }
