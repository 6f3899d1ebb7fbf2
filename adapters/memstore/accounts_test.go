package memstore_test

import (
	"testing"

	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
	"github.com/siteline/outbox/ports/adminaudittest"
)

func TestAccountContract(t *testing.T) {
	accountstest.Exercise(t, func(t *testing.T) ports.AccountStore { return memstore.New() })
}

func TestAdminAuditContract(t *testing.T) {
	adminaudittest.Exercise(t, func(t *testing.T) ports.AdminAudit { return memstore.New() })
}
