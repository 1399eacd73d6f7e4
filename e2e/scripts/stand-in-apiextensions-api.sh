#!/usr/bin/env bash
# Writes a stand-in for the Go module k8s.io/apiextensions-api into $1 (a scratch directory).
#
# Why: Kubernetes 1.38 moved the CustomResourceDefinition API types and their generated clients
# out of k8s.io/apiextensions-apiserver into a new module, k8s.io/apiextensions-api, and the Go
# module proxy reachable here serves no version of it yet, so 1.38's kube-apiserver and
# kube-controller-manager do not build from the proxy alone. The types themselves did not move
# far: this script takes them from k8s.io/apiextensions-apiserver v0.37.2 (the packages
# pkg/apis/apiextensions/v1 and v1beta1 without their conversions to the internal version, which
# 1.38 keeps in apiextensions-apiserver, and pkg/client) and rewrites their import paths to the
# new module's. 1.38's own apiextensions-apiserver (validation, conversion, the CRD handler) is
# built unchanged against it; a field 1.38 had added to the types would fail that build here,
# not pass silently.
#
# Nothing of it is committed: the result is written at build time from the module proxy, into
# a directory the caller removes. Drop this once the proxy serves k8s.io/apiextensions-api.
set -euo pipefail

out=${1:?usage: stand-in-apiextensions-api.sh <output directory>}
from_version=v0.37.2

src=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/apiextensions-apiserver@$from_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "$src/pkg/apis/apiextensions/v1" ]] ||
  { echo "k8s.io/apiextensions-apiserver@$from_version did not download" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/pkg/apis/apiextensions" "$out/pkg/client"
for version in v1 v1beta1; do
  mkdir -p "$out/pkg/apis/apiextensions/$version"
  for f in "$src/pkg/apis/apiextensions/$version"/*.go; do
    case $(basename "$f") in
      *_test.go | conversion.go | zz_generated.conversion.go) continue ;;
    esac
    cp "$f" "$out/pkg/apis/apiextensions/$version/"
  done
  # conversion.go, left behind, also held the JSON literal the marshalling code compares with.
  printf 'package %s\n\nvar nullLiteral = []byte(`null`)\n' "$version" \
    >"$out/pkg/apis/apiextensions/$version/null_literal.go"
done
cp -r "$src/pkg/client/." "$out/pkg/client/"
chmod -R u+w "$out"
find "$out" -name '*_test.go' -delete
rm -rf "$out/pkg/client/clientset_test"
# Import paths of the new module; 1.38 moved from structured-merge-diff v6 to v7.
find "$out" -name '*.go' -exec sed -i \
  -e 's#k8s.io/apiextensions-apiserver/pkg/client#k8s.io/apiextensions-api/pkg/client#g' \
  -e 's#"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1#"k8s.io/apiextensions-api/pkg/apis/apiextensions/v1#g' \
  -e 's#sigs.k8s.io/structured-merge-diff/v6#sigs.k8s.io/structured-merge-diff/v7#g' {} +
printf 'module k8s.io/apiextensions-api\n\ngo 1.26.0\n' >"$out/go.mod"
