#!/bin/sh
# RKE2 TEST DOUBLE: rke2-uninstall.sh as RKE2's tar install leaves it: stops everything (rke2-killall.sh),
# disables the units and removes the binaries, units, configuration and data. Like RKE2's, it leaves the node's
# object in the API and a server's etcd member in the cluster: removing those is the caller's job.
set -e
[ "$(id -u)" -eq 0 ] || { echo "$(basename "$0") must be run as root" >&2; exit 1; }
PREFIX=/usr/local
"$PREFIX/bin/rke2-killall.sh" || true
systemctl disable rke2-server.service rke2-agent.service 2>/dev/null || true
systemctl reset-failed rke2-server.service rke2-agent.service 2>/dev/null || true
rm -f "$PREFIX/lib/systemd/system/rke2-server.service" "$PREFIX/lib/systemd/system/rke2-agent.service" \
      "$PREFIX/lib/systemd/system/rke2-server.env" "$PREFIX/lib/systemd/system/rke2-agent.env"
systemctl daemon-reload
rm -rf /etc/rancher/rke2 /etc/rancher/node /var/lib/rancher/rke2 /var/lib/kubelet "$PREFIX/share/rke2"
rmdir /etc/rancher /var/lib/rancher 2>/dev/null || true
rm -f "$PREFIX/bin/rke2" "$PREFIX/bin/rke2-killall.sh" "$PREFIX/bin/rke2-uninstall.sh"
