// Package ui holds the dashboard that tenured serves at /ui: a page, a
// script and a stylesheet, built from the TypeScript sources in web/
// (npm run build there) into dist/, which is committed and embedded, so
// building tenure needs no Node.js.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed dist
var dist embed.FS

// Files returns the built assets: index.html, app.js and app.css.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it is there
	}
	return sub
}

// Handler serves the assets, with the page at "/".
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		files.ServeHTTP(w, r)
	})
}
