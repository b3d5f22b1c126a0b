//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// handoffSignal returns a channel that receives SIGUSR1, which asks a
// leading 'tenure elect' to hand its leadership off, and a function that
// stops the delivery.
func handoffSignal() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	return ch, func() { signal.Stop(ch) }
}
