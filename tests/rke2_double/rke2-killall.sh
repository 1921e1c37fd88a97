#!/bin/sh
# RKE2 TEST DOUBLE: rke2-killall.sh stops every RKE2 process on the node, as RKE2's script does (it also
# unmounts kubelet and container mounts and removes CNI interfaces, which the double never creates).
[ "$(id -u)" -eq 0 ] || { echo "$(basename "$0") must be run as root" >&2; exit 1; }
systemctl stop rke2-server.service rke2-agent.service 2>/dev/null || true
for name in rke2 etcd; do pkill -KILL -x "$name" 2>/dev/null || true; done
exit 0
