package fx

import (
	"context"
	"sync"
	"time"

	uberfx "go.uber.org/fx"
)

// buildUndo undoes what the constructors of an app that failed to build
// had already started (the embedded server, its connection, the data-dir
// lock register a stop hook without a start hook, and fx runs stop hooks
// only for an app that started): HandleError, an uberfx.ErrorHook, runs those
// stop hooks, the last registered first.
type buildUndo struct {
	mu    sync.Mutex
	stops []func(context.Context) error
}

// HandleError runs the recorded stop hooks (uberfx.ErrorHandler).
func (u *buildUndo) HandleError(error) {
	u.mu.Lock()
	stops := u.stops
	u.stops = nil
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := len(stops) - 1; i >= 0; i-- {
		_ = stops[i](ctx)
	}
}

// undoLifecycle is the uberfx.Lifecycle constructors see: it records each
// stop hook that has no start hook (what the constructor itself started)
// for buildUndo as well.
type undoLifecycle struct {
	uberfx.Lifecycle
	u *buildUndo
}

func (l undoLifecycle) Append(h uberfx.Hook) {
	l.Lifecycle.Append(h)
	if h.OnStart == nil && h.OnStop != nil {
		l.u.mu.Lock()
		l.u.stops = append(l.u.stops, h.OnStop)
		l.u.mu.Unlock()
	}
}

// undoOnBuildFailure is the option that wires buildUndo into an app.
func undoOnBuildFailure() uberfx.Option {
	u := &buildUndo{}
	return uberfx.Options(
		uberfx.ErrorHook(u),
		uberfx.Decorate(func(lc uberfx.Lifecycle) uberfx.Lifecycle { return undoLifecycle{lc, u} }),
	)
}
