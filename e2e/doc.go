// Package e2e holds end-to-end tests: they build the tenured and tenure
// binaries and run them as real processes on loopback, as a user would.
package e2e
