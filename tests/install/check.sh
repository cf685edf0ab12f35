#!/bin/sh
# Installs into a temporary prefix and builds tests/install/consumer.c against it with pkg-config,
# the way a user would, then runs it (shared library, found through the rpath we pass).
set -e
B=$1
command -v pkg-config >/dev/null || { echo "SKIP (pkg-config not found)"; exit 77; }
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
make -s install BUILD="$B" PREFIX="$prefix" > /dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror tests/install/consumer.c $(pkg-config --cflags --libs infer) \
   -Wl,-rpath,"$prefix/lib" -o "$prefix/consumer"
"$prefix/consumer"
cc -std=c11 -Wall -Wextra -Werror tests/install/consumer.c $(pkg-config --cflags infer) \
   "$prefix/lib/libinfer.a" $(pkg-config --libs-only-other --static infer) $(pkg-config --static --libs infer | sed 's/-linfer//') -o "$prefix/consumer-static"
"$prefix/consumer-static"
echo "install: shared and static consumers ran"
