#!/usr/bin/env bash
# Builds the container images (docs/images.md); `make images` runs it.
#
#   VERSION=0.1.0 bash images/build.sh            the operator and hypervisor images
#   ... BASE=debian                               bases made from Debian packages (no registry),
#                                                 plus the Alertmanager image
#   ... IMAGE_PREFIX=registry.example.com/team/tensorfusion
#   ... ENGINE=docker|podman|buildah              else the first of them that works here
#   ... NO_CACHE=1                                every step again (to check reproducibility)
#
# The Dockerfiles are the same for every engine. With podman or buildah the build is
# reproducible: every file and the image are dated SOURCE_DATE_EPOCH (default: the time of the
# last commit), so the same sources give the same image ID.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=images/debian/bases.env
. images/debian/bases.env

VERSION=${VERSION:?VERSION is the package version (make images sets it)}
IMAGE_PREFIX=${IMAGE_PREFIX:-tensorfusion}
BASE=${BASE:-registry}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo "$DEBIAN_EPOCH")}
CACHE=${TF_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tensor-fusion/images}
export SOURCE_DATE_EPOCH

fail() {
    echo "images/build.sh: $*" >&2
    exit 1
}

pick_engine() {
    if [[ -n ${ENGINE:-} ]]; then
        command -v "$ENGINE" >/dev/null 2>&1 || fail "ENGINE=$ENGINE is not on PATH"
        return
    fi
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null 2>&1; then
        ENGINE=podman
    elif command -v buildah >/dev/null 2>&1; then
        ENGINE=buildah
    else
        fail "no engine: neither a Docker engine ('docker info') nor podman nor buildah works here (docs/images.md)"
    fi
}

# The engine's build command with what this machine needs: runc (crun refuses hybrid cgroups),
# ulimits a process without CAP_SYS_RESOURCE may set, the machine's CA bundle and pip
# configuration mounted into RUN steps only (no layer holds them), and RUN steps on the host's
# network: podman's default bridge network would add an interface, an address and NAT rules to
# the machine's own namespace.
build() {
    [[ ${NO_CACHE:-} == 1 ]] && set -- --no-cache "$@"
    case $ENGINE in
    docker)
        DOCKER_BUILDKIT=1 docker build "$@"
        ;;
    podman | buildah)
        local flags=(--network host --timestamp "$SOURCE_DATE_EPOCH" --ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
        local file
        for file in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
            [[ -f $file ]] && flags+=(--volume "$file:$file:ro")
        done
        command -v runc >/dev/null 2>&1 && flags+=(--runtime runc)
        if [[ $ENGINE == podman ]]; then
            podman build "${flags[@]}" "$@"
        else
            buildah bud "${flags[@]}" "$@"
        fi
        ;;
    esac
}

image_exists() {
    case $ENGINE in
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
    podman) podman image exists "$1" ;;
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    esac
}

# The mmdebstrap rootfs of the Debian packages PACKAGES (comma-separated), cached under $CACHE by
# its package list and mirrors; prints its path. Every file is dated DEBIAN_EPOCH.
debian_rootfs() {
    local packages=$1 key tarball
    command -v mmdebstrap >/dev/null 2>&1 ||
        fail "BASE=debian needs mmdebstrap, umoci and skopeo (apt-get install mmdebstrap umoci skopeo)"
    key=$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR" "$DEBIAN_EPOCH" "$packages" | sha256sum | cut -c1-16)
    tarball=$CACHE/debian-$DEBIAN_SUITE-$key.tar
    mkdir -p "$CACHE"
    if [[ ! -f $tarball ]]; then
        echo "images: mmdebstrap $DEBIAN_SUITE with $packages" >&2
        SOURCE_DATE_EPOCH=$DEBIAN_EPOCH mmdebstrap --quiet --variant=minbase --include="$packages" \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --customize-hook='rm -f "$1"/etc/hostname "$1"/etc/resolv.conf' \
            "$DEBIAN_SUITE" "${tarball%.tar}.part.tar" \
            "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" \
            "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
            "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main" >&2
        mv "${tarball%.tar}.part.tar" "$tarball"
    fi
    echo "$tarball"
}

# The version of Debian package $2 in rootfs tarball $1, without Debian's suffix (0.25.0 of
# 0.25.0+ds-2+b5).
package_version() {
    local version
    version=$(tar -xOf "$1" ./var/lib/dpkg/status |
        awk -v p="$2" '$1 == "Package:" { on = ($2 == p) } on && $1 == "Version:" { print $2; exit }')
    [[ -n $version ]] || fail "package $2 is not in $1"
    version=${version#*:}
    echo "${version%%[-+~]*}"
}

# A base image NAME from the Debian packages PACKAGES: their rootfs made an OCI image with umoci
# (dated DEBIAN_EPOCH) and copied into the engine's store.
debian_base() {
    local name=$1 packages=$2 tarball layout bundle created
    image_exists "$name" && return
    command -v umoci >/dev/null 2>&1 && command -v skopeo >/dev/null 2>&1 ||
        fail "BASE=debian needs mmdebstrap, umoci and skopeo (apt-get install mmdebstrap umoci skopeo)"
    tarball=$(debian_rootfs "$packages")
    layout=$(mktemp -d)
    bundle=$layout/bundle
    created=$(date -u -d "@$DEBIAN_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
    umoci init --layout "$layout/oci"
    umoci new --image "$layout/oci:base"
    umoci unpack --image "$layout/oci:base" "$bundle" >/dev/null
    tar -xpf "$tarball" -C "$bundle/rootfs" --numeric-owner
    umoci repack --image "$layout/oci:base" --history.created "$created" \
        --history.created_by "mmdebstrap --variant=minbase $DEBIAN_SUITE $packages" "$bundle"
    umoci config --image "$layout/oci:base" --created "$created" --history.created "$created" \
        --history.created_by "images/build.sh" --config.env LANG=C.UTF-8 \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.cmd /bin/sh
    case $ENGINE in
    docker) skopeo copy --quiet "oci:$layout/oci:base" "docker-daemon:$name" ;;
    *) skopeo copy --quiet "oci:$layout/oci:base" "containers-storage:$name" ;;
    esac
    rm -rf "$layout"
}

# The Go build base: the Python base plus this machine's Go, which must be the version that
# controller.Dockerfile's GO_IMAGE names.
debian_go_base() {
    local name=$1 python_base=$2 wanted have
    wanted=$(sed -n 's/^ARG GO_IMAGE=golang:\([0-9.]*\)-.*/\1/p' images/controller.Dockerfile)
    have=$(go env GOVERSION 2>/dev/null || true)
    [[ $have == "go$wanted" ]] || fail "BASE=debian builds the kube-scheduler stage with this machine's Go, which must be go$wanted (GO_IMAGE of images/controller.Dockerfile); found '${have:-no go}'"
    image_exists "$name" && return
    build -f "$ROOT/images/debian/go.Containerfile" --build-arg "BASE_IMAGE=$python_base" -t "$name" "$(go env GOROOT)"
}

main() {
    pick_engine
    local args=(--build-arg "VERSION=$VERSION" --build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH")
    local alertmanager=""
    if [[ $BASE == debian ]]; then
        local python_base=localhost/tensorfusion/debian-python:$DEBIAN_SUITE
        local go_base
        go_base=localhost/tensorfusion/debian-go:$(go env GOVERSION | sed 's/^go//')-$DEBIAN_SUITE
        local alertmanager_base=localhost/tensorfusion/debian-alertmanager:$DEBIAN_SUITE
        debian_base "$python_base" "$PYTHON_PACKAGES"
        debian_go_base "$go_base" "$python_base"
        debian_base "$alertmanager_base" "$ALERTMANAGER_PACKAGES"
        args+=(--build-arg "PYTHON_IMAGE=$python_base" --build-arg "GO_IMAGE=$go_base")
        alertmanager=$alertmanager_base
    elif [[ $BASE != registry ]]; then
        fail "BASE=$BASE: expected registry (the Dockerfiles' defaults) or debian"
    fi
    echo "images: building with $ENGINE (BASE=$BASE, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
    build -f images/controller.Dockerfile "${args[@]}" -t "$IMAGE_PREFIX/tensor-fusion-operator:$VERSION" .
    build -f images/hypervisor.Dockerfile "${args[@]}" -t "$IMAGE_PREFIX/tensor-fusion-hypervisor:$VERSION" .
    if [[ -n $alertmanager ]]; then
        local version
        version=$(package_version "$(debian_rootfs "$ALERTMANAGER_PACKAGES")" prometheus-alertmanager)
        build -f images/alertmanager.Dockerfile --build-arg "ALERTMANAGER_BASE=$alertmanager" \
            --build-arg "VERSION=$version" -t "$IMAGE_PREFIX/alertmanager-debian:$version" .
    fi
    # The images an earlier build of these tags left untagged.
    case $ENGINE in
    podman) podman image prune -f >/dev/null ;;
    buildah) buildah rmi --prune >/dev/null ;;
    esac
}

main "$@"
