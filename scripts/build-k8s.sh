#!/usr/bin/env bash
# Builds the Kubernetes control plane the integration tests start on 127.0.0.1: kube-apiserver, kube-scheduler,
# kube-controller-manager, etcd, kwok and Kueue's manager, from the Go module proxy only (no binary is downloaded).
# The versions are pinned by the wrapper modules in tests/k8s/modules/*/ (go.mod + go.sum); the binaries go to a
# cache outside the checkout keyed by a hash of those files, so a warm machine reuses them and a version bump builds
# anew. Idempotent: a second run prints that it reused the cache. `make test` runs it; `make run` does not need it.
#
#   scripts/build-k8s.sh            build (or reuse) and print the time it took
#   scripts/build-k8s.sh --bin-dir  print the cache's bin directory and exit (what the test fixture reads)
#
# Environment: GPU_AUTOSCALER_K8S_CACHE (default ~/.cache/gpu-autoscaler/k8s), K8S_BUILD_JOBS (go build -p;
# default: all cores), K8S_BUILD_NICE (nice level for the compilers; default 0, a shared machine sets 19).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODS="$ROOT/tests/k8s/modules"
MODULES=(controlplane etcd kwok kueue)
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager etcd kwok kueue)
KWOK_STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
	pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml)
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"

command -v go >/dev/null || { echo "build-k8s: the Go toolchain (go) is not on PATH; install Go 1.26 or newer" >&2; exit 1; }

key() {
	# the versions: every wrapper module's go.mod and go.sum, and the Go release that compiles them
	{ go env GOVERSION; for m in "${MODULES[@]}"; do cat "$MODS/$m/go.mod" "$MODS/$m/go.sum"; done; } |
		sha256sum | cut -c1-16
}

CACHE_ROOT=${GPU_AUTOSCALER_K8S_CACHE:-$HOME/.cache/gpu-autoscaler/k8s}
DIR="$CACHE_ROOT/$(key)"
BIN="$DIR/bin"
if [[ ${1:-} == --bin-dir ]]; then
	echo "$BIN"
	exit 0
fi

bins_complete() { for b in "${BINARIES[@]}"; do [[ -x $BIN/$b ]] || return 1; done; }
share_complete() { [[ -f $DIR/share/.complete && -f $DIR/share/jobset/jobsets.yaml ]]; }

start=$(date +%s)
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9 # two `make test` at once: the second waits, then reuses
if bins_complete && share_complete; then
	echo "build-k8s: reused $BIN ($(( $(date +%s) - start )) s)"
	exit 0
fi
tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$DIR"

src() { # the pinned module's directory in the module cache (downloaded from the proxy if absent)
	(cd "$MODS/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}
if ! share_complete; then
	# what the fixture needs beside the binaries, from the same pinned modules: kwok's stages (nodes Ready, pods
	# Running, deleted pods gone), Kueue's CRDs, its webhook configurations and the CRDs' conversion patches, and the
	# JobSet CRD of the JobSet release Kueue's go.sum pins (Kueue's jobset integration makes a JobSet's Workload)
	mkdir -p "$tmp/share/kwok-stages" "$tmp/share/kueue" "$tmp/share/jobset"
	kwok_src=$(src kwok sigs.k8s.io/kwok)
	for s in "${KWOK_STAGES[@]}"; do cp "$kwok_src/kustomize/stage/$s" "$tmp/share/kwok-stages/"; done
	kueue_src=$(src kueue sigs.k8s.io/kueue)/config/components
	cp -r "$kueue_src/crd/bases" "$tmp/share/kueue/crds"
	cp -r "$kueue_src/crd/patches" "$tmp/share/kueue/crd-patches"
	cp "$kueue_src/crd/kustomization.yaml" "$tmp/share/kueue/crd-kustomization.yaml"
	cp "$kueue_src/webhook/manifests.yaml" "$tmp/share/kueue/webhooks.yaml"
	jobset_src=$(src kueue sigs.k8s.io/jobset)
	cp "$jobset_src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$tmp/share/jobset/jobsets.yaml"
	chmod -R u+w "$tmp/share"
	touch "$tmp/share/.complete"
	rm -rf "$DIR/share"
	mv "$tmp/share" "$DIR/share"
fi
if bins_complete; then
	echo "build-k8s: reused $BIN, completed $DIR/share ($(( $(date +%s) - start )) s)"
	exit 0
fi

jobs=${K8S_BUILD_JOBS:-$(nproc)}
nice_level=${K8S_BUILD_NICE:-0}
# the version the servers report (k8s's own build stamps it the same way; kwok and Kueue read it)
kv=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p; s/^\tk8s.io\/kubernetes \(v[^ ]*\).*/\1/p' \
	"$MODS/controlplane/go.mod" | head -1)
major=${kv#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld+=" -X $p.gitVersion=$kv -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

build() { # module, the binaries it makes (the first package's name for one package), packages...
	# only what is missing: a build that stopped half-way resumes where it stopped
	local m=$1 names=$2 b t0 missing=""; shift 2
	for b in ${names//,/ }; do [[ -x $BIN/$b ]] || missing=1; done
	[[ -n $missing ]] || return 0
	t0=$(date +%s)
	mkdir -p "$tmp/$m"
	local out="$tmp/$m/"
	(( $# > 1 )) || out="$tmp/$m/$names"
	(cd "$MODS/$m" && nice -n "$nice_level" go build -p "$jobs" -trimpath -ldflags "$ld" -o "$out" "$@")
	for b in ${names//,/ }; do mv "$tmp/$m/$b" "$BIN/$b"; done
	echo "build-k8s: $m built in $(( $(date +%s) - t0 )) s"
}
echo "build-k8s: building what is missing of ${BINARIES[*]} (Kubernetes $kv) into $BIN, go build -p $jobs"
mkdir -p "$BIN"
build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build controlplane kube-apiserver,kube-scheduler,kube-controller-manager k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
build kueue kueue sigs.k8s.io/kueue/cmd/kueue
bins_complete || { echo "build-k8s: a binary is missing from $BIN after the build" >&2; exit 1; }
echo "build-k8s: built $BIN in $(( $(date +%s) - start )) s"
