package guardtest

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer is a log destination safe for concurrent writes: the tests of
// the entrances give it to their server's logger and count the lines the
// refusals wrote.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines written so far, without the last newline.
func (l *LogBuffer) Lines() []string {
	return strings.Split(strings.TrimSpace(l.String()), "\n")
}
