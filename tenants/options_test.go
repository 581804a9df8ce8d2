package tenants_test

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/tenants"
)

// TestAdminOptions: NewAdmin refuses a missing registry or policy and a
// bad option with an error wrapping protocol.ErrInvalidOption.
func TestAdminOptions(t *testing.T) {
	f := newFixture(t, nil)
	for name, c := range map[string]struct {
		reg  *tenants.Registry
		pol  *tenants.Policy
		opts []tenants.AdminOption
	}{
		"nil registry": {nil, f.pol, nil},
		"nil policy":   {f.reg, nil, nil},
		"zero timeout": {f.reg, f.pol, []tenants.AdminOption{tenants.WithTimeout(0)}},
		"nil clock":    {f.reg, f.pol, []tenants.AdminOption{tenants.WithClock(nil)}},
	} {
		if a, err := tenants.NewAdmin(c.reg, c.pol, c.opts...); !errors.Is(err, protocol.ErrInvalidOption) || a != nil {
			t.Errorf("%s: %v, want errInvalidOption", name, err)
		}
	}
	if _, err := tenants.NewAdmin(f.reg, f.pol, tenants.WithLogger(nil), tenants.WithTimeout(1)); err != nil {
		t.Fatal(err)
	}
}
