// Package etcdauth turns on etcd's authentication for a fleet: the user root (role root), and
// per fleet a user limited to its key prefix, so that a balancer's credentials open its own
// fleet's desired state and nothing else. A user without a password authenticates by
// certificate (with --client-cert-auth etcd takes a client certificate's common name as its
// user); one with a password by user name and password. Used by the lab and the tests; an
// operator does the same with etcdctl (docs/fleet.md, "A secured store").
package etcdauth

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Grant is a user with readwrite on every key under Prefix + "/"; Password "" authenticates by
// certificate.
type Grant struct {
	User, Prefix string
	Password     string
}

// Role is the name of a grant's role.
func (g Grant) Role() string { return g.User + "-fleet" }

// Enable adds root (with rootPassword; "": by certificate) and the grants' users and roles, then
// turns auth on. cli must be connected as root or to an etcd without auth yet. Users and roles
// already there are kept (a lab brought up again).
func Enable(ctx context.Context, cli *clientv3.Client, rootPassword string, grants []Grant) error {
	if err := addUser(ctx, cli, "root", rootPassword, "root"); err != nil {
		return err
	}
	for _, g := range grants {
		if _, err := cli.RoleAdd(ctx, g.Role()); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("add etcd role %s: %w", g.Role(), err)
		}
		key := g.Prefix + "/"
		if _, err := cli.RoleGrantPermission(ctx, g.Role(), key, clientv3.GetPrefixRangeEnd(key), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return fmt.Errorf("grant etcd role %s readwrite on %s: %w", g.Role(), key, err)
		}
		if err := addUser(ctx, cli, g.User, g.Password, g.Role()); err != nil {
			return err
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable etcd auth: %w", err)
	}
	return nil
}

// addUser adds a user with a role and a password, or none ("": it authenticates by certificate).
func addUser(ctx context.Context, cli *clientv3.Client, user, password, role string) error {
	if _, err := cli.UserAddWithOptions(ctx, user, password, &clientv3.UserAddOptions{NoPassword: password == ""}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("add etcd user %s: %w", user, err)
	}
	if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("grant etcd user %s the role %s: %w", user, role, err)
	}
	return nil
}
