//go:build !linux

package durability

import "errors"

// storeWatch is inotify's (storewatch_linux.go); elsewhere rounds walk the
// store (storesync.go).
type storeWatch struct{}

func newStoreWatch(string, func(path string, data bool, stream string)) (*storeWatch, error) {
	return nil, errors.New("durability: no inotify on this platform")
}

func (*storeWatch) drain() error   { return nil }
func (*storeWatch) rewatch() error { return nil }
func (*storeWatch) close()         {}

var errOverflow = errors.New("durability: inotify queue overflow")
