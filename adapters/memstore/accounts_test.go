package memstore_test

import (
	"testing"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
)

func TestAccountContract(t *testing.T) {
	accountstest.Exercise(t, func(t *testing.T) ports.AccountStore { return memstore.New() })
}
