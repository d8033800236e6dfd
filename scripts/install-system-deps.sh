#!/usr/bin/env bash
# Installs the Debian packages that the integration tier runs for real, when they are missing.
set -euo pipefail
need=()
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
# The e2e tier (docs/testing.md, "Real nodes"): images built with podman from Debian bases, and
# the nodes' runtime, CNI plugins and kube-proxy's tools.
for tool in podman:podman buildah:buildah skopeo:skopeo umoci:umoci mmdebstrap:mmdebstrap \
    runc:runc iptables:iptables conntrack:conntrack; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
# The console's browser test (docs/observability.md): Debian's Chromium and its WebDriver.
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
