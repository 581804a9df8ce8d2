package sluicefx

import (
	"context"
	"sync"
	"time"

	"go.uber.org/fx"
)

// buildUndo undoes what the constructors of an app that failed to build
// had already started (the embedded server, its connection, the data-dir
// lock register a stop hook without a start hook, and fx runs stop hooks
// only for an app that started): HandleError, an fx.ErrorHook, runs those
// stop hooks, the last registered first.
type buildUndo struct {
	mu    sync.Mutex
	stops []func(context.Context) error
}

// HandleError runs the recorded stop hooks (fx.ErrorHandler).
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

// undoLifecycle is the fx.Lifecycle constructors see: it records each
// stop hook that has no start hook (what the constructor itself started)
// for buildUndo as well.
type undoLifecycle struct {
	fx.Lifecycle
	u *buildUndo
}

func (l undoLifecycle) Append(h fx.Hook) {
	l.Lifecycle.Append(h)
	if h.OnStart == nil && h.OnStop != nil {
		l.u.mu.Lock()
		l.u.stops = append(l.u.stops, h.OnStop)
		l.u.mu.Unlock()
	}
}

// undoOnBuildFailure is the option that wires buildUndo into an app.
func undoOnBuildFailure() fx.Option {
	u := &buildUndo{}
	return fx.Options(
		fx.ErrorHook(u),
		fx.Decorate(func(lc fx.Lifecycle) fx.Lifecycle { return undoLifecycle{lc, u} }),
	)
}
