package pb

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The refusal of a call over its caller's rate is a ResourceExhausted status
// whose message ends with the wait after which a call will pass: the server
// writes it with RateLimited, the notify client reads it with RetryAfter.
// (A refusal made before the call is read, in grpc's tap handle, carries no
// status details, so the hint lives in the message.) A ResourceExhausted
// without it — a request over the size limit — is not worth repeating.
const retryMarker = "; retry in "

// RateLimited is the message of a call refused because its caller spent its
// calls: rate a second on average, burst at once; retry is the wait until
// the next call passes.
func RateLimited(rate float64, burst int, retry time.Duration) string {
	ms := max(retry.Milliseconds(), 1)
	return fmt.Sprintf("rate limit of the site API: at most %g calls a second per caller, %d at once%s%dms",
		rate, burst, retryMarker, ms)
}

// RetryAfter returns the wait a RateLimited message names, and false for
// any other message.
func RetryAfter(msg string) (time.Duration, bool) {
	i := strings.LastIndex(msg, retryMarker)
	if i < 0 || !strings.HasPrefix(msg, "rate limit of the site API") {
		return 0, false
	}
	ms, ok := strings.CutSuffix(msg[i+len(retryMarker):], "ms")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || n > int64(time.Hour/time.Millisecond) {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}
