package pluginhost

import "runtime"

// spawner runs the starts of one plugin's processes on one OS thread that
// lives as long as the spawner does. On Linux the parent-death signal of a
// process (dieWithCentral) is tied to the thread that started it, not to
// central's process: a process started from a thread that later ends would
// be killed with it. Go ends a thread only when a goroutine locked to it
// exits; the spawner's goroutine stays locked to its thread until stop, which
// the host calls only once the plugin's process is gone.
type spawner struct {
	work chan func()
	done chan struct{}
}

func newSpawner() *spawner {
	s := &spawner{work: make(chan func()), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// Never unlocked: the thread ends with the goroutine, at stop.
		runtime.LockOSThread()
		for f := range s.work {
			f()
		}
	}()
	return s
}

// run calls f on the spawner's thread and returns when f has.
func (s *spawner) run(f func()) {
	ran := make(chan struct{})
	s.work <- func() {
		defer close(ran)
		f()
	}
	<-ran
}

// stop ends the spawner's goroutine and thread.
func (s *spawner) stop() {
	close(s.work)
	<-s.done
}
