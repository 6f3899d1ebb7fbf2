package channel

import (
	"context"
	"testing"
	"time"
)

// oneHangs delivers "ok" at once and waits on "hang" until its context
// ends, then answers each target: what httpdeliver does when one webhook
// receiver hangs until the attempt's deadline (its per-target timeout and
// central's delivery timeout are both 30 s by default).
type oneHangs struct{}

func (oneHangs) Deliver(ctx context.Context, req Request) Result {
	rs := make([]TargetResult, len(req.Targets))
	for i, t := range req.Targets {
		if t == "hang" {
			<-ctx.Done()
			rs[i] = TargetResult{Outcome: Transient, Error: "no answer before the attempt ended"}
			continue
		}
		rs[i] = TargetResult{Outcome: Success}
	}
	return PerTarget(rs)
}

// TestDeadlineKeepsDeliveredTargets: a target the plugin delivered is
// reported delivered even when another target of the same delivery runs
// into the deadline: the client waits for the plugin's answer (which it
// gives just before the deadline) rather than give up at the deadline with
// one Transient outcome for every target, which would send the delivered
// target the notification again at the next retry.
func TestDeadlineKeepsDeliveredTargets(t *testing.T) {
	c, _, _ := serve(t, oneHangs{})
	lost := 0
	const runs = 20
	for range runs {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		res := c.Deliver(ctx, Request{Notification: Notification{ID: "n1", Subject: "s"}, Targets: []string{"ok", "hang"}})
		cancel()
		if len(res.Targets) != 2 || res.Targets[0].Outcome != Success {
			lost++
			if lost == 1 {
				t.Logf("answer: %+v", res)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d deliveries lost the delivered target's Success at the deadline", lost, runs)
	}
}

// TestShutdownKeepsDeliveredTargets: at shutdown central cancels the
// attempt's context. The plugin goes on under the delivery's own timeout
// and delivers "ok"; the client waits for its answer, so that the core
// records "ok" delivered rather than release the row untouched and send
// "ok" the notification again after the restart.
func TestShutdownKeepsDeliveredTargets(t *testing.T) {
	c, _, _ := serve(t, oneHangs{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel) // shutdown after "ok" was delivered
	res := c.Deliver(ctx, Request{Notification: Notification{ID: "n1", Subject: "s"}, Targets: []string{"ok", "hang"}})
	if len(res.Targets) != 2 || res.Targets[0].Outcome != Success {
		t.Fatalf("a shutdown lost the delivered target's Success: %+v", res)
	}
}
