#!/usr/bin/env bash
# Builds the VA-API conformance fake (a VA driver loaded by the real libva.so.2) and the layout checker into
# tests/fakes/build/. Idempotent; never fails the run: when something is missing the VA tests skip and name it.
set -u
here="$(cd "$(dirname "$0")/../.." && pwd)"
src="$here/tests/fakes/va"
out="$here/tests/fakes/build"
mkdir -p "$out"

need=()
[ -f /usr/include/va/va_backend.h ] || need+=(libva-dev)
ldconfig -p 2>/dev/null | grep -q 'libva.so.2 ' || need+=(libva2)
ldconfig -p 2>/dev/null | grep -q 'libva-drm.so.2 ' || need+=(libva-drm2)
ldconfig -p 2>/dev/null | grep -q 'libva-x11.so.2 ' || need+=(libva-x11-2)
command -v Xvfb >/dev/null || need+=(xvfb)
command -v gcc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
    if [ -n "${INTEROP_FAKES_NO_APT:-}" ]; then
        echo "fakes_va: missing ${need[*]} (INTEROP_FAKES_NO_APT set: not installing)"
    elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "fakes_va: installing ${need[*]}"
        # a fresh machine has no package lists yet: update once and try again
        (DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock sh -c 'apt-get install -y -q "$@" || { apt-get update -q && apt-get install -y -q "$@"; }' \
            apt "${need[@]}" >/tmp/interop-fakes-va-apt.log 2>&1) ||
            echo "fakes_va: apt-get install ${need[*]} failed (see /tmp/interop-fakes-va-apt.log); VA fake tests will skip"
    else
        echo "fakes_va: missing ${need[*]} (not root, cannot install); VA fake tests will skip"
    fi
fi

build() {  # build OUT SRC ARGS...: only when the source is newer
    local dst="$1" file="$2"; shift 2
    if [ ! -e "$dst" ] || [ "$file" -nt "$dst" ]; then
        gcc -Wall -Wextra -O1 "$@" -o "$dst.tmp" "$file" && mv "$dst.tmp" "$dst" || { rm -f "$dst.tmp"; echo "fakes_va: building $dst failed"; }
    fi
}
if command -v gcc >/dev/null && [ -f /usr/include/va/va_backend.h ]; then
    build "$out/interopfake_drv_video.so" "$src/fake_drv_video.c" -shared -fPIC -pthread
    build "$out/va_layout" "$src/layout.c"
fi
exit 0
