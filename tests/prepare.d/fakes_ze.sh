#!/usr/bin/env bash
# Builds the Level Zero conformance fake (tests/fakes/ze) against the real headers of Debian's libze-dev,
# into tests/fakes/build/ze/. Idempotent; never fails the make run: when it cannot build, the tests that
# need the fake skip and name what is missing.
set -u
here="$(cd "$(dirname "$0")/../.." && pwd)"
src="$here/tests/fakes/ze"
out="$here/tests/fakes/build/ze"
hdr=/usr/include/level_zero

need=()
[ -f "$hdr/ze_ddi.h" ] || need+=(libze-dev)
[ -e /usr/lib/x86_64-linux-gnu/libze_loader.so.1 ] || ls /usr/lib/*/libze_loader.so.1 >/dev/null 2>&1 || need+=(libze1)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
    if [ -n "${INTEROP_FAKES_NO_APT:-}" ]; then
        echo "fakes_ze: missing ${need[*]} (INTEROP_FAKES_NO_APT set: not installing)"
    elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # another helper may run apt at the same time: take the shared lock
        # a fresh machine has no package lists yet: update once and try again
        DEBIAN_FRONTEND=noninteractive flock /tmp/apt.lock sh -c 'apt-get install -y -q "$@" || { apt-get update -q && apt-get install -y -q "$@"; }' \
            apt "${need[@]}" >/tmp/interop-fakes-ze-apt.log 2>&1 || echo "fakes_ze: apt-get install ${need[*]} failed (see /tmp/interop-fakes-ze-apt.log)"
    else
        echo "fakes_ze: missing ${need[*]} (not root, cannot install); Level Zero fake tests will skip"
    fi
fi
[ -f "$hdr/ze_ddi.h" ] && command -v gcc >/dev/null 2>&1 || { echo "fakes_ze: skipped (missing: ${need[*]})"; exit 0; }

mkdir -p "$out"
lib="$out/libze_fake_driver.so.1"
inc="$out/fake_ze_tables.inc"
if [ ! -f "$lib" ] || [ "$src/fake_ze_driver.c" -nt "$lib" ] || [ "$src/ze_mem_import_system_memory_ext.h" -nt "$lib" ] || [ "$0" -nt "$lib" ]; then
    # every DDI-table getter the installed headers declare, except the six the fake implements
    awk '/^ZE_DLLEXPORT ze_result_t ZE_APICALL$/ { getline n; if (n ~ /Get[A-Za-z]*ProcAddrTable\($/) {
            sub(/\($/, "", n); getline; getline t; split(t, a, " "); ty = a[1]; sub(/\*$/, "", ty); print n, ty } }' \
        "$hdr/ze_ddi.h" "$hdr/zet_ddi.h" "$hdr/zes_ddi.h" |
        grep -v -E '^zeGet(Global|Driver|Device|Context|Mem|CommandList)ProcAddrTable ' |
        awk '{ printf "FAKE_TABLE(%s, %s)\n", $1, $2 }' > "$inc.tmp" && mv "$inc.tmp" "$inc"
    gcc -std=c11 -O1 -Wall -Wextra -Werror -Wno-cast-function-type -fPIC -shared -fvisibility=hidden \
        -I"$out" -o "$lib.tmp" "$src/fake_ze_driver.c" -lpthread && mv "$lib.tmp" "$lib" ||
        { echo "fakes_ze: building the fake driver failed"; exit 0; }
fi
echo "fakes_ze: $lib"

# the ov::Any handle check (tests/test_ov_any_handle.py), against the openvino wheel's own headers
py="$here/.venv/bin/python"
if command -v g++ >/dev/null 2>&1 && [ -x "$py" ]; then
    ovroot="$("$py" -c 'import importlib.util as u, os; s = u.find_spec("openvino"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)"
    ovlib="$(ls "$ovroot"/libs/libopenvino.so.* 2>/dev/null | head -1)"
    exe="$out/ov_any_handle"
    if [ -n "$ovlib" ] && [ -f "$ovroot/include/openvino/core/any.hpp" ] && { [ ! -f "$exe" ] || [ "$src/ov_any_handle.cpp" -nt "$exe" ]; }; then
        g++ -std=c++17 -O0 -I"$ovroot/include" "$src/ov_any_handle.cpp" -o "$exe" "$ovlib" -Wl,-rpath,"$ovroot/libs" ||
            echo "fakes_ze: the ov::Any check did not build"
    fi
fi
exit 0
