// SPDX-License-Identifier: GPL-2.0

#include <linux/netdevice.h>

__rust_helper struct net_device *rust_helper_first_net_device(struct net *net)
{
	return first_net_device(net);
}

__rust_helper struct net_device *rust_helper_next_net_device(struct net_device *dev)
{
	return next_net_device(dev);
}

__rust_helper void rust_helper_dev_hold(struct net_device *dev)
{
	dev_hold(dev);
}

__rust_helper void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

__rust_helper bool rust_helper_netif_running(const struct net_device *dev)
{
	return netif_running(dev);
}

__rust_helper bool rust_helper_netif_carrier_ok(const struct net_device *dev)
{
	return netif_carrier_ok(dev);
}

__rust_helper struct net_device *
rust_helper_netdev_notifier_info_to_dev(const struct netdev_notifier_info *info)
{
	return netdev_notifier_info_to_dev(info);
}
