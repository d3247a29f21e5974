#!/usr/bin/env bash
# Build the five kruntimes images from images/Dockerfile (one target each).
#
#   images/build.sh                      # kruntimes/<image>:<version from pyproject.toml>
#   REGISTRY=ghcr.io/me TAG=dev PUSH=1 images/build.sh
#   images/build.sh gateway runtimed     # only these targets
#
# Environment: REGISTRY (image name prefix, default "kruntimes"), TAG (default: the project
# version), DOCKER (the client, default "docker"; "podman" works too), PLATFORM (optional
# --platform value), PUSH=1 to push after building. Needs a running container engine: when
# there is none, it says so and exits 2 without building anything.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
docker=${DOCKER:-docker}
registry=${REGISTRY:-kruntimes}
all_targets=(runtimed controlplane gateway python-runtime bash-runtime)

if [[ -z ${TAG:-} ]]; then
    TAG=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n 1)
    TAG=${TAG//+/_}
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    targets=("${all_targets[@]}")
fi
for target in "${targets[@]}"; do
    if [[ " ${all_targets[*]} " != *" $target "* ]]; then
        echo "images/build.sh: unknown image '$target' (known: ${all_targets[*]})" >&2
        exit 2
    fi
done

if ! command -v "$docker" >/dev/null 2>&1; then
    echo "images/build.sh: '$docker' is not installed: building images needs Docker (or set DOCKER=podman)." >&2
    echo "  Without a container engine, use localkube instead: 'krt dev up' runs the same components as local processes." >&2
    exit 2
fi
if ! "$docker" info >/dev/null 2>&1; then
    echo "images/build.sh: no container engine answers ('$docker info' failed): start the Docker daemon, or point DOCKER_HOST at one." >&2
    echo "  Without a container engine, use localkube instead: 'krt dev up' runs the same components as local processes." >&2
    exit 2
fi

platform=()
if [[ -n ${PLATFORM:-} ]]; then
    platform=(--platform "$PLATFORM")
fi
for target in "${targets[@]}"; do
    image="$registry/$target:$TAG"
    echo "==> $image"
    "$docker" build "${platform[@]}" --file "$here/Dockerfile" --target "$target" --tag "$image" "$root"
    if [[ ${PUSH:-0} == 1 ]]; then
        "$docker" push "$image"
    fi
done
echo "built: ${targets[*]} as $registry/<image>:$TAG"
