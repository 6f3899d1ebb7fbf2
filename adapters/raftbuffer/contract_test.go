package raftbuffer

import (
	"testing"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/buffertest"
)

func TestContractSingleNode(t *testing.T) {
	buffertest.Exercise(t, func(t *testing.T) ports.Buffer {
		return newCluster(t, 1).leader()
	})
}

func TestContractThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node group per subtest")
	}
	buffertest.Exercise(t, func(t *testing.T) ports.Buffer {
		return newCluster(t, 3).leader()
	})
}
