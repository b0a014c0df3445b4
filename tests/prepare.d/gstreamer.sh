#!/usr/bin/env bash
# Installs GStreamer (tier A: its tests run everywhere, never skip) from Debian's packages, plus what PyGObject
# needs to build from PyPI (girepository-1.0 headers, cairo, pkg-config). Idempotent. Without root it fails
# and prints the exact apt command to run, because the GStreamer tests would otherwise fail one by one.
# python3-gi, python3-gst-1.0 and python3-numpy: the system-Python test (gst-python overrides) and gst_map bench.
# libgstreamer-plugins-bad1.0-0 (libgstva-1.0) and gir1.2-gst-plugins-bad-1.0: VA memory (gst_to_vaapi, tier C,
# tested on the fake VA driver through ctypes; the typelib is for apps that use GstVa from Python).
set -u

pkgs=(gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-libav
      gstreamer1.0-tools gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
      libgstreamer-plugins-bad1.0-0 gir1.2-gst-plugins-bad-1.0
      python3-gi python3-gst-1.0 python3-numpy
      libgirepository1.0-dev libcairo2-dev pkg-config)

need=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y ${need[*]}"
if [ "$(id -u)" != 0 ]; then
    echo "gstreamer: missing ${need[*]}; as root run:" >&2
    echo "    sudo sh -c '$cmd'" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "gstreamer: missing ${need[*]} and no apt-get here; install GStreamer 1.22+ with the same plugins" >&2
    exit 1
fi
echo "gstreamer: installing ${need[*]}"
log=/tmp/interop-gstreamer-apt.log
# a fresh machine has stale or no package lists: update first
if ! DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends "$@"' \
        apt "${need[@]}" >"$log" 2>&1; then
    echo "gstreamer: '$cmd' failed (see $log)" >&2
    exit 1
fi
exit 0
