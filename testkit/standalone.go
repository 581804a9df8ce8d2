package testkit

import (
	"fmt"
	"os"
)

// Standalone is a T for code that has no *testing.T: a runnable Example or
// a small program that wants a kit. Fatalf panics; TempDir makes a fresh
// directory under one root; Close runs the cleanups, the last registered
// first, then removes the root.
//
//	t := testkit.NewStandalone()
//	defer t.Close()
//	k := testkit.New(t)
type Standalone struct {
	root     string
	cleanups []func()
}

var _ T = (*Standalone)(nil)

// NewStandalone returns a Standalone with a fresh temporary root directory.
// It panics when the directory cannot be made.
func NewStandalone() *Standalone {
	root, err := os.MkdirTemp("", "sluice-testkit")
	if err != nil {
		panic(fmt.Sprintf("testkit: temporary directory: %v", err))
	}
	return &Standalone{root: root}
}

// Helper does nothing (it is there for T).
func (s *Standalone) Helper() {}

// Fatalf panics with the formatted message.
func (s *Standalone) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Cleanup registers f to run at Close.
func (s *Standalone) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// TempDir returns a new directory under the root, removed at Close.
func (s *Standalone) TempDir() string {
	d, err := os.MkdirTemp(s.root, "t")
	if err != nil {
		s.Fatalf("testkit: temporary directory: %v", err)
	}
	return d
}

// Close runs the cleanups, the last registered first, and removes the root.
func (s *Standalone) Close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
	_ = os.RemoveAll(s.root)
}
