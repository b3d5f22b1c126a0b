//go:build !unix

package filefence

import (
	"context"
	"errors"
)

// lock is not implemented here: the guard needs flock.
func (d *Dir) lock(ctx context.Context) (func(), error) {
	return nil, errors.New("filefence: needs a Unix system (flock)")
}
