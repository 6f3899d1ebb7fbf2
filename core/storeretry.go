package core

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/siteline/outbox/ports"
)

// The waits between the tries of a call retried through a blip of the
// database (or of the site's buffer): from blipFirstWait, doubling, to
// blipMaxWait.
const (
	blipFirstWait = 50 * time.Millisecond
	blipMaxWait   = 2 * time.Second
)

// retryBlip calls op until it succeeds, fails with an error that trying again
// cannot fix (see unfixable), or no further try may start, and returns how
// many tries it made and the last error.
//
// Between tries it waits from 50 ms, doubling up to 2 s, each wait drawn
// between half and all of that value so that the nodes a blip hit together do
// not come back together. No try starts after until (zero: no such bound) or
// after ctx ends; a wait longer than half the time left is shortened to
// that half, and when less than 50 ms is left no further try starts. A try under way is cut short only by ctx: op gets ctx
// and bounds a single try itself if it must.
//
// Each failed try after which another follows is logged at WARN with its
// number; giving up after a failure is logged at ERROR, with then saying what
// follows from it (at WARN when ctx was simply cancelled: the caller
// stopped). An unfixable error on the first try is only returned: the
// caller reports it as before.
func retryBlip(ctx context.Context, log *slog.Logger, until time.Time, what, then string,
	op func(context.Context) error, attrs ...any) (tries int, err error) {
	if dl, ok := ctx.Deadline(); ok && (until.IsZero() || dl.Before(until)) {
		until = dl
	}
	giveUp := func(why string) {
		level := slog.LevelError
		if errors.Is(context.Cause(ctx), context.Canceled) {
			// The caller stopped (shutdown, a lost leadership), no bound
			// ran out; a signal's cause (signal.NotifyContext) is one too.
			level = slog.LevelWarn
		}
		log.Log(context.WithoutCancel(ctx), level, what+" failed; giving up: "+why,
			append([]any{"tries", tries, "then", then, "err", err}, attrs...)...)
	}
	wait := blipFirstWait
	for {
		tries++
		err = op(ctx)
		if err == nil {
			return tries, nil
		}
		if unfixable(err) {
			if tries > 1 {
				giveUp("trying again cannot fix this error")
			}
			return tries, err
		}
		if ctx.Err() != nil {
			giveUp("stopped")
			return tries, err
		}
		d := wait/2 + rand.N(wait-wait/2+1)
		wait = min(2*wait, blipMaxWait)
		if !until.IsZero() {
			left := time.Until(until)
			if left < blipFirstWait {
				giveUp("no time is left to try again")
				return tries, err
			}
			d = min(d, left/2)
		}
		log.Warn(what+" failed; trying again",
			append([]any{"try", tries, "wait", d.Round(time.Millisecond).String(), "err", err}, attrs...)...)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			giveUp("stopped while waiting to try again")
			return tries, err
		case <-t.C:
		}
	}
}

// retryValue is retryBlip for an op that returns a value: it returns the
// value of the try that succeeded (the zero value when none did).
func retryValue[T any](ctx context.Context, log *slog.Logger, until time.Time, what, then string,
	op func(context.Context) (T, error), attrs ...any) (v T, tries int, err error) {
	tries, err = retryBlip(ctx, log, until, what, then, func(ctx context.Context) error {
		var err error
		v, err = op(ctx)
		return err
	}, attrs...)
	return v, tries, err
}

// unfixable reports whether err is one that trying the same call again
// cannot fix: bad input, a missing row, a refused state, a refused caller.
// Anything else (a dropped connection, a refused connection, a timeout, a
// failover) may pass.
func unfixable(err error) bool {
	for _, e := range []error{ports.ErrInvalid, ports.ErrNotFound, ports.ErrConflict,
		ports.ErrUnauthenticated, ports.ErrForbidden} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// errGraceOver is the cause of a graceContext's end.
var errGraceOver = errors.New("the time allowed after shutdown began is over")

// graceContext returns a context that carries ctx's values, is not cancelled
// with ctx, and ends grace after ctx ends: the writes that record what has
// happened go on through a shutdown, but a dead database cannot hold the
// shutdown up for longer than grace. The returned stop releases it.
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	// Runs in a goroutine of its own once ctx ends, and returns when the
	// grace is over or gctx ends first (stop).
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel(errGraceOver)
		case <-gctx.Done():
		}
	})
	return gctx, func() {
		stopAfter()
		cancel(errGraceOver)
	}
}

// realDeadline turns an instant of the service's clock (which tests move by
// hand) into the wall-clock instant as far away from now; a zero instant
// (no lease) into now.
func (s *Service) realDeadline(at time.Time) time.Time {
	now := time.Now()
	if at.IsZero() {
		return now
	}
	return now.Add(at.Sub(s.clock.Now()))
}
