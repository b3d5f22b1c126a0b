// Package dirdigest describes the contents of a directory tree (every
// file with its size and SHA-256, every directory), so that a test can
// show that something left a directory exactly as it was.
package dirdigest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Of returns a description of the tree at dir: one sorted line per file
// ("path size sha256") and per directory ("path/"). Equal trees give
// equal descriptions.
func Of(dir string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %x", rel, len(data), sha256.Sum256(data)))
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}
