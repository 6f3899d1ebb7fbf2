package pb

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ConnectParams is how every client of the site API (the notify client, a
// follower passing a call to its leader) reconnects to a node: soon after
// it comes back, which matters in a failover, where gRPC's default waits up
// to two minutes.
var ConnectParams = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  50 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}
