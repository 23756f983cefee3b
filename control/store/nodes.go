package store

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/control/config"
)

// The node registry: PREFIX/nodes/<name> holds a node's name and labels (bgp.node, bgp.labels),
// written by the node's daemon when it starts. It is what a VIP's announce_from and overrides
// are checked against when a change is written, so that a typo is refused instead of withdrawing
// the VIP from every node. Entries stay after a node stops (a node down for maintenance is still
// a node of the fleet); `etcdctl del PREFIX/nodes/<name>` forgets one.

// nodeValue is a registry entry as stored.
type nodeValue struct {
	Name   string   `yaml:"name"`
	Labels []string `yaml:"labels,omitempty"`
}

func (s *Store) nodesPrefix() string { return s.u.Prefix + "/nodes/" }

// NodeKey is the registry key of a node.
func (s *Store) NodeKey(name string) string { return s.nodesPrefix() + url.PathEscape(name) }

// RegisterNode writes the node's entry (unchanged entries are not rewritten).
func (s *Store) RegisterNode(ctx context.Context, n config.Node) error {
	var buf bytes.Buffer
	if err := yaml.NewEncoder(&buf).Encode(nodeValue{Name: n.Name, Labels: n.Labels}); err != nil {
		return fmt.Errorf("register node %s: %w", n.Name, err)
	}
	k := s.NodeKey(n.Name)
	_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", buf.String())).Else(clientv3.OpPut(k, buf.String())).Commit()
	if err != nil {
		return fmt.Errorf("register node %s in %s: %w", n.Name, s.u, s.Explain(err))
	}
	return nil
}

// Nodes lists the registered nodes by name; an entry that is not valid YAML is skipped.
func (s *Store) Nodes(ctx context.Context) ([]config.Node, error) {
	resp, err := s.cli.Get(ctx, s.nodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list nodes of %s: %w", s.u, s.Explain(err))
	}
	var out []config.Node
	for _, kv := range resp.Kvs {
		var v nodeValue
		if yaml.Unmarshal(kv.Value, &v) != nil || v.Name == "" {
			continue
		}
		out = append(out, config.Node{Name: v.Name, Labels: v.Labels})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out, nil
}
