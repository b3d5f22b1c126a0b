//go:build !unix

package main

import (
	"context"
	"errors"
)

func (a *app) runCommand(context.Context, []string) error {
	return errors.New("tenure run needs process groups and signals: it runs on Unix systems only")
}
