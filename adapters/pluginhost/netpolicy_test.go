package pluginhost_test

import (
	"testing"

	"github.com/siteline/outbox/adapters/pluginhost"
	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// TestPluginGetsTheNetworkPolicy: every plugin process finds the host's
// delivery network policy in its environment (the default one when the
// host is given none), and a plugin's own Env cannot replace it.
func TestPluginGetsTheNetworkPolicy(t *testing.T) {
	getenv := delivery(map[string]string{"getenv": channel.NetworkPolicyEnv})
	want := func(p *channel.NetworkPolicy) string { return p.Encode() }

	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	res := deliver(t, mustChannel(t, h, "test"), getenv)
	if res.Error != want(channel.DefaultNetworkPolicy()) {
		t.Errorf("no policy given: the plugin saw %+v, want the default policy", res)
	}

	policy, err := channel.NewNetworkPolicy([]string{"127.0.0.1"}, []string{"10.9.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	p := testPlugin(t)
	p.Env = append(p.Env, channel.NetworkPolicyEnv+`={"allow":["0.0.0.0/0"],"deny":[]}`)
	h = startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{p}, NetworkPolicy: policy})
	res = deliver(t, mustChannel(t, h, "test"), getenv)
	if res.Error != want(policy) {
		t.Errorf("the plugin saw %+v, want the host's policy %s", res, policy.Encode())
	}
}
